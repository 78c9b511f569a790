"""Websocket tickets remember the Django user they were issued to, and are indexed by who was issued them.

``account`` is the primary key of the authenticated user of the request that issued the ticket
(the scope's ``user`` is whatever ``SCOPE_RESOLVER`` makes of it): a ticket is refused when that
user has been deactivated or deleted since. ``ap_wsticket_issued`` serves the count behind
``WS_TICKETS_PER_MINUTE``. Tickets issued before this migration have no account and are checked
as before until they expire (``WS_TICKET_TTL``).
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("agent_persistence", "0013_checkpoint_save_bounds_the_key_check"),
    ]

    operations = [
        migrations.AddField(
            model_name="websocketticket",
            name="account",
            field=models.CharField(
                blank=True, default="", max_length=255,
                help_text="The primary key of the Django user the ticket was issued to; it must still be active when the ticket is spent.",
            ),
        ),
        migrations.AddIndex(
            model_name="websocketticket",
            index=models.Index(fields=["tenant", "user", "created_at"], name="ap_wsticket_issued"),
        ),
    ]
