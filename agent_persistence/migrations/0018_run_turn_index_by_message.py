"""The index of a turn's runs leads with the answer's message id, so one id can be looked up in every conversation.

A turn start that names its answer's id is refused (``message_exists``) when any run, in any
conversation, already answers under that id: two turns sealing under one id would leave the second
running, its answer lost. ``(message_id, conversation)`` serves that lookup and, both columns being
compared for equality, every lookup of a turn's runs the old ``(conversation, message_id)`` index
served; a conversation's runs alone are found through its other indexes. The new index is made
before the old one goes, so the runs are never without one.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("agent_persistence", "0017_artifact_records"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["message_id", "conversation"], name="ap_run_turn"),
        ),
        migrations.RemoveIndex(
            model_name="run",
            name="ap_run_conv_turn",
        ),
    ]
