"""Blobs keep the caller's custom metadata (text keys to text values, TanStack's ``customMetadata``).

Existing blobs get ``{}``; a put replaces a blob's pairs with its own (none given: ``{}``).
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("agent_persistence", "0014_ticket_account_and_issue_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="blob",
            name="custom_metadata",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
