"""Record-only artifacts (TanStack's ``artifacts.save(record)``): saved under the caller's id, pointing at bytes.

``blob_key`` names a blob of the owner's tenant the caller put (not owned: deleting the record
keeps it), ``source_url`` bytes hosted elsewhere; ``blob`` (the blob an artifact saved with its
bytes owns) becomes optional, and so does ``size``. Every artifact points somewhere
(``ap_artifact_has_content``); existing artifacts all own a blob.
"""

import django.db.models.deletion
from django.db import migrations, models

import agent_persistence.models.artifacts


class Migration(migrations.Migration):

    dependencies = [
        ("agent_persistence", "0016_generation_run_artifacts"),
    ]

    operations = [
        migrations.AddField(
            model_name="artifact",
            name="blob_key",
            field=agent_persistence.models.artifacts.KeyField(blank=True, default="", max_length=1024),
        ),
        migrations.AddField(
            model_name="artifact",
            name="source_url",
            field=models.CharField(blank=True, default="", max_length=2048),
        ),
        migrations.AlterField(
            model_name="artifact",
            name="blob",
            field=models.OneToOneField(
                blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name="artifact",
                to="agent_persistence.blob",
            ),
        ),
        migrations.AlterField(
            model_name="artifact",
            name="size",
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
        migrations.AddConstraint(
            model_name="artifact",
            constraint=models.CheckConstraint(
                condition=models.Q(blob__isnull=False) | ~models.Q(blob_key="") | ~models.Q(source_url=""),
                name="ap_artifact_has_content",
            ),
        ),
    ]
