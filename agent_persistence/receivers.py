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


# -- deleting a Django user (issue 25: ON_USER_DELETE) -----------------------------------------

from django.conf import settings as django_settings  # noqa: E402
from django.db.models import ProtectedError  # noqa: E402
from django.db.models.signals import pre_delete  # noqa: E402


def _user_delete_mode() -> str:
    from .conf import app_settings

    return app_settings.ON_USER_DELETE


@receiver(pre_delete, sender=django_settings.AUTH_USER_MODEL, dispatch_uid="agent_persistence.refuse_user_delete")
def refuse_user_delete(sender: Any, instance: Any, **kwargs: Any) -> None:
    """ON_USER_DELETE "refuse": a user who still has rows cannot be deleted (ProtectedError; the delete rolls back)."""
    if _user_delete_mode() != "refuse" or instance.pk is None:
        return
    from .erasure import user_rows

    user = str(instance.pk)
    remaining = [model.__name__ for model, rows in user_rows(None, user, account=user).items() if rows.exists()]
    if remaining:
        raise ProtectedError(
            f"User {user} still has agent_persistence data ({', '.join(remaining)}); "
            "erase it first (manage.py erase_user) or set ON_USER_DELETE to \"erase\".",
            set(),
        )


@receiver(post_delete, sender=django_settings.AUTH_USER_MODEL, dispatch_uid="agent_persistence.erase_deleted_user")
def erase_deleted_user(sender: Any, instance: Any, **kwargs: Any) -> None:
    """ON_USER_DELETE "erase" (the default): the user's rows, in every tenant, go in the delete's transaction.

    The user string is ``str(user.pk)``, the default scope resolver's. A running
    turn does not stop the delete: its conversation is erased with the rest
    (``force``), and its producer, fenced, writes nothing after.
    """
    if _user_delete_mode() != "erase" or instance.pk is None:
        return
    from .erasure import erase_user

    user = str(instance.pk)
    erase_user(None, user, account=user, force=True)
