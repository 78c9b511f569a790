"""The running supervision rows are indexed by their conversation instead of their heartbeat.

Every fenced write stamps ``heartbeat_at`` (each recording flush, checkpoint save and event of a
producer, and the heartbeat itself). While a column of an index changed with it, each stamp was
a new row version with new entries in both of the table's indexes. Now no index holds the
column, so PostgreSQL can make the stamp a heap-only (HOT) update and the indexes stop growing
with the heartbeats (``python -m benchmarks checkpoints --paths`` times a stamp both ways). The
dead-turn queries still find the running rows through the partial index and sort the few they
match.

The new index is made before the old one goes, so the reaper is never without one.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("agent_persistence", "0011_checkpoint_save_function"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="turnsupervision",
            index=models.Index(condition=models.Q(("status", "running")), fields=["conversation"], name="ap_supervision_live"),
        ),
        migrations.RemoveIndex(
            model_name="turnsupervision",
            name="ap_supervision_running",
        ),
    ]
