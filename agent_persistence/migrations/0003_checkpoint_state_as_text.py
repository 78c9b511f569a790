"""Agent checkpoints keep their state as JSON text, compressed with lz4 on PostgreSQL where the server has it.

The state is written whole and read whole: as text it is stored as the store
encoded it (no jsonb parse) and read with one json.loads. lz4 compresses the
large values several times faster than PostgreSQL's default pglz.
"""

from django.db import migrations

import agent_persistence.fields


def use_lz4(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)"
        )
        if cursor.fetchone() is None:
            return  # a server built without lz4 keeps pglz
        table = schema_editor.quote_name(apps.get_model("agent_persistence", "AgentCheckpoint")._meta.db_table)
        cursor.execute(f'ALTER TABLE {table} ALTER COLUMN "state" SET COMPRESSION lz4')


class Migration(migrations.Migration):

    dependencies = [
        ("agent_persistence", "0002_langgraph_checkpoints"),
    ]

    operations = [
        migrations.AlterField(
            model_name="agentcheckpoint",
            name="state",
            field=agent_persistence.fields.JSONTextField(
                default=dict, help_text="The state's JSON, as text (written whole, read whole)."
            ),
        ),
        migrations.RunPython(use_lz4, migrations.RunPython.noop),
    ]
