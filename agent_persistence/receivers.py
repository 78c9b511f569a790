"""Signal receivers the app connects in ``AppConfig.ready()``."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models.signals import post_delete
from django.dispatch import receiver

from .models import StoredFile

logger = logging.getLogger(__name__)


@receiver(post_delete, sender=StoredFile, dispatch_uid="agent_persistence.delete_file_content")
def delete_file_content(sender: type[StoredFile], instance: StoredFile, **kwargs: Any) -> None:
    """Remove a file's content once the deletion of its record (or its conversation) commits."""
    name = instance.content.name
    storage = instance.content.storage
    if not name:
        return

    def remove() -> None:
        try:
            storage.delete(name)
        except OSError:
            logger.warning("Could not delete the content of file %s", instance.pk, exc_info=True)

    transaction.on_commit(remove)
