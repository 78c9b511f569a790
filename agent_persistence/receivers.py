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


# -- blobs and artifacts (issue 11) ----------------------------------------------------------------

from .models import Artifact, Blob  # noqa: E402


@receiver(post_delete, sender=Blob, dispatch_uid="agent_persistence.delete_blob_content")
def delete_blob_content(sender: type[Blob], instance: Blob, **kwargs: Any) -> None:
    """Remove a blob's bytes once the deletion of its row (or of what held it) commits."""
    from .stores.blobs import delete_content_on_commit

    if instance.content.name:
        delete_content_on_commit(instance.content.storage, instance.content.name)


@receiver(post_delete, sender=Artifact, dispatch_uid="agent_persistence.delete_artifact_blob")
def delete_artifact_blob(sender: type[Artifact], instance: Artifact, **kwargs: Any) -> None:
    """An artifact owns its blob: deleting it (or its run, or its conversation) deletes the blob in the same transaction."""
    Blob.objects.filter(pk=instance.blob_id).delete()
