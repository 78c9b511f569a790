"""PostgreSQL: the large values written whole (checkpoint states, stream recordings, LangGraph
blobs and checkpoints) are compressed with lz4 instead of pglz when the server has it.

pglz spent most of a 1 MB checkpoint save's server time (20 ms against lz4's 8 ms for the same
upsert, measured with ``benchmarks/README.md``'s method); lz4 also reads back faster. Only values
written from now on are compressed the new way (each save rewrites its row). A server built
without lz4 keeps pglz: the migration passes over it. Other databases: nothing to do.
"""

from django.db import NotSupportedError, migrations, transaction

#: (model, field) pairs of the values written whole, often hundreds of kilobytes.
COLUMNS = [
    ("agentcheckpoint", "state"),
    ("streamrecording", "message"),
    ("graphblob", "value"),
    ("graphcheckpoint", "checkpoint"),
]


def set_compression(method):
    def operation(apps, schema_editor):
        connection = schema_editor.connection
        if connection.vendor != "postgresql":
            return
        quote = schema_editor.quote_name
        for model_name, field_name in COLUMNS:
            model = apps.get_model("agent_persistence", model_name)
            column = model._meta.get_field(field_name).column
            try:
                with transaction.atomic(using=connection.alias):
                    schema_editor.execute(
                        f"ALTER TABLE {quote(model._meta.db_table)} ALTER COLUMN {quote(column)} SET COMPRESSION {method}"
                    )
            except NotSupportedError:  # "compression method lz4 not supported": built without lz4
                return

    return operation


class Migration(migrations.Migration):

    dependencies = [
        ("agent_persistence", "0009_listing_keyset_indexes"),
    ]

    operations = [
        migrations.RunPython(set_compression("lz4"), set_compression("default"), elidable=True),
    ]
