"""Generation runs keep refs to what they made (TanStack's generation run ``artifacts``).

A list of JSON objects, written by ``update(..., artifacts=[...])`` (replaced whole) and returned
by ``get`` / ``latest`` as ``run.artifact_refs`` (``run.artifacts`` is the reverse relation to the
run's Artifact rows); existing runs get ``[]``.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("agent_persistence", "0015_blob_custom_metadata"),
    ]

    operations = [
        migrations.AddField(
            model_name="generationrun",
            name="artifact_refs",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
