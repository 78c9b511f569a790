"""PostgreSQL: the fenced checkpoint save as a PL/pgSQL function, whose statements are planned once
per database session instead of on every save.

Django's connection prepares nothing by name (``prepare_threshold`` unset, so transaction-mode
poolers keep working), so the save's one ``WITH ... INSERT ... ON CONFLICT`` statement was parsed
and planned on every call: about a quarter of a 1 KB save. PL/pgSQL keeps the plans of a
function's statements for the session on its own, invisible to poolers (nothing in
``pg_prepared_statements``), and the ``SELECT`` that calls it costs next to nothing to plan.

``agent_persistence_save_checkpoint(lock_timeout, conversation, epoch, state, size, message,
saved_at)`` bounds its lock waits by ``lock_timeout`` (milliseconds, as text) and puts the
previous bound back before it returns; stamps the heartbeat of the conversation's supervision
row if it is running at ``epoch`` (lock 1 of the order, the fence); and then upserts the
checkpoint unless a newer epoch stored it. It returns whether the checkpoint was written.
``CheckpointStore.save`` falls back to the one statement where the function is missing (a test
database built without migrations). Other databases have nothing to do.
"""

from django.db import migrations

FUNCTION = "agent_persistence_save_checkpoint"
SIGNATURE = f"{FUNCTION}(text, uuid, bigint, text, bigint, uuid, timestamptz)"


def function_sql(apps, quote):
    """The ``CREATE OR REPLACE FUNCTION`` statement, for the tables of the models as ``apps`` has them."""
    checkpoint = apps.get_model("agent_persistence", "agentcheckpoint")._meta
    supervision = apps.get_model("agent_persistence", "turnsupervision")._meta

    def column(meta, name):
        return quote(meta.get_field(name).column)

    table, fence_table = quote(checkpoint.db_table), quote(supervision.db_table)
    names = ["conversation", "state", "size", "message_id", "epoch", "saved_at"]
    columns = [column(checkpoint, name) for name in names]
    updated = ", ".join(f"{name} = excluded.{name}" for name in columns[1:])
    epoch = column(checkpoint, "epoch")
    return f"""
CREATE OR REPLACE FUNCTION {FUNCTION}(
    p_lock_timeout text, p_conversation uuid, p_epoch bigint, p_state text, p_size bigint,
    p_message uuid, p_saved_at timestamptz
) RETURNS boolean LANGUAGE plpgsql AS $function$
DECLARE
    previous_lock_timeout text := current_setting('lock_timeout');
    written boolean := false;
BEGIN
    PERFORM set_config('lock_timeout', p_lock_timeout, true);
    UPDATE {fence_table} SET {column(supervision, "heartbeat_at")} = p_saved_at
        WHERE {column(supervision, "conversation")} = p_conversation AND {column(supervision, "epoch")} = p_epoch
        AND {column(supervision, "status")} = 'running';
    IF FOUND THEN
        INSERT INTO {table} ({", ".join(columns)})
            VALUES (p_conversation, p_state, p_size, p_message, p_epoch, p_saved_at)
            ON CONFLICT ({columns[0]}) DO UPDATE SET {updated}
            WHERE {table}.{epoch} <= excluded.{epoch};
        written := FOUND;
    END IF;
    PERFORM set_config('lock_timeout', previous_lock_timeout, true);
    RETURN written;
END
$function$
"""


def create_function(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(function_sql(apps, schema_editor.quote_name))


def drop_function(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {SIGNATURE}")


class Migration(migrations.Migration):

    dependencies = [
        ("agent_persistence", "0010_lz4_compression"),
    ]

    operations = [
        migrations.RunPython(create_function, drop_function),
    ]
