"""Conversations count the edits and deletes of their messages, for the thread's If-Match tag.

``update_message`` and ``delete_message`` move only the message's own ``updated_at`` (an edit is
not news of the conversation: its place in the newest-first lists stays), so the thread tag
(``"<version>.<next_position>.<updated_at>.<thread_revision>"``) takes ``thread_revision``, which
they raise by one, and a save read before an edit or a delete is refused instead of restoring the
old messages. ``db_default`` lets the one-statement inserts of PostgreSQL leave the column out.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("agent_persistence", "0018_run_turn_index_by_message"),
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="thread_revision",
            field=models.PositiveBigIntegerField(db_default=0, default=0, editable=False),
        ),
    ]
