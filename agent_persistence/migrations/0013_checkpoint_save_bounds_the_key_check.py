"""PostgreSQL: the checkpoint save function bounds the wait of the key check of a first checkpoint too.

A conversation's first checkpoint inserts a row whose foreign key to the conversation is checked at
commit (Django makes foreign keys ``DEFERRABLE INITIALLY DEFERRED``), after the function has put the
caller's lock bound back. Behind another transaction's lock on the conversation row that check waited
the lock out on the producer's database thread, stalling every other seal of the process. The
function now takes the lock the check needs (``FOR KEY SHARE`` of the conversation row) itself, right
after the insert and still under ``PRODUCER_LOCK_TIMEOUT``, so the check at commit finds it held and
waits for nothing; a save stuck behind the lock fails within the bound and the producer retries it.
An update of a stored checkpoint changes no key and takes no such lock.
"""

import importlib

from django.db import migrations

FUNCTION = "agent_persistence_save_checkpoint"
PREVIOUS = importlib.import_module("agent_persistence.migrations.0011_checkpoint_save_function")


def function_sql(apps, quote):
    """The ``CREATE OR REPLACE FUNCTION`` statement, for the tables of the models as ``apps`` has them."""
    checkpoint = apps.get_model("agent_persistence", "agentcheckpoint")._meta
    supervision = apps.get_model("agent_persistence", "turnsupervision")._meta
    conversation = apps.get_model("agent_persistence", "conversation")._meta

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
    inserted boolean;
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
            WHERE {table}.{epoch} <= excluded.{epoch}
            RETURNING xmax = 0 INTO inserted;
        written := FOUND;
        IF inserted THEN
            PERFORM 1 FROM {quote(conversation.db_table)} WHERE {quote(conversation.pk.column)} = p_conversation
                FOR KEY SHARE;
        END IF;
    END IF;
    PERFORM set_config('lock_timeout', previous_lock_timeout, true);
    RETURN written;
END
$function$
"""


def create_function(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(function_sql(apps, schema_editor.quote_name))


def restore_previous(apps, schema_editor):
    PREVIOUS.create_function(apps, schema_editor)


class Migration(migrations.Migration):

    dependencies = [
        ("agent_persistence", "0012_supervision_index_without_heartbeat"),
    ]

    operations = [
        migrations.RunPython(create_function, restore_previous),
    ]
