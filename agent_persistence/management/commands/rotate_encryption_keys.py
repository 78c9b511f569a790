"""``manage.py rotate_encryption_keys``: re-encrypt every stored secret under the newest key.

Put the new key first in ``AGENT_PERSISTENCE["ENCRYPTION_KEYS"]`` (keep the old
ones after it), deploy, run this command, then drop the old keys. It walks every
encrypted column of every model of the app in primary-key order, ``--batch-size``
rows per transaction, each batch locked with ``select_for_update`` while it is
rewritten, and writes a row only while it still holds the ciphertext it read,
so a concurrent write is never lost. A value already under the newest key is
left alone (running it twice rotates nothing the second time); a value no key
decrypts is left as it is, counted and logged by row id, never by content.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from django.apps import apps
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.db.models import Model, TextField, Value
from django.db.models.functions import Cast

from ...conf import app_settings
from ...fields import DecryptionFailed, EncryptedTextField, rotate

logger = logging.getLogger(__name__)


@dataclass
class RotationCounts:
    rotated: int = 0
    current: int = 0
    unreadable: int = 0

    def add(self, other: RotationCounts) -> None:
        self.rotated += other.rotated
        self.current += other.current
        self.unreadable += other.unreadable


def encrypted_fields(model: type[Model]) -> list[str]:
    return [f.attname for f in model._meta.concrete_fields if isinstance(f, EncryptedTextField)]


def newest_key() -> Fernet:
    keys = app_settings.ENCRYPTION_KEYS
    keys = [keys] if isinstance(keys, str) else list(keys or [])
    if not keys:
        raise CommandError("AGENT_PERSISTENCE['ENCRYPTION_KEYS'] is empty: there is no key to rotate to.")
    try:
        return Fernet(keys[0])
    except (ValueError, TypeError):
        raise CommandError("AGENT_PERSISTENCE['ENCRYPTION_KEYS'][0] is not a valid Fernet key.") from None


def rotate_model(model: type[Model], batch_size: int) -> RotationCounts:
    """Re-encrypt every secret of ``model`` under the newest key, one batch per transaction."""
    fields = encrypted_fields(model)
    counts = RotationCounts()
    if not fields:
        return counts
    newest = newest_key()
    raw = {f"{name}__ciphertext": Cast(name, output_field=TextField()) for name in fields}
    last_pk: Any = None
    while True:
        with transaction.atomic():
            queryset = model._default_manager.select_for_update().order_by("pk")
            if last_pk is not None:
                queryset = queryset.filter(pk__gt=last_pk)
            rows = list(queryset.annotate(**raw).values("pk", *raw)[:batch_size])
            for row in rows:
                counts.add(_rotate_row(model, row, fields, newest))
        if len(rows) < batch_size:
            return counts
        last_pk = rows[-1]["pk"]


def _rotate_row(model: type[Model], row: dict[str, Any], fields: list[str], newest: Fernet) -> RotationCounts:
    counts = RotationCounts()
    for name in fields:
        ciphertext = row[f"{name}__ciphertext"]
        if ciphertext is None:
            continue
        try:
            newest.decrypt(ciphertext.encode())
            counts.current += 1
            continue
        except (InvalidToken, ValueError, TypeError):
            pass
        try:
            rotated = rotate(ciphertext)
        except DecryptionFailed:
            counts.unreadable += 1
            logger.warning("Cannot decrypt %s.%s of row %s with any configured key; left as it is.", model.__name__, name, row["pk"])
            continue
        # Only while the row still holds what we read: a concurrent write wins, and is already new.
        updated = (
            model._default_manager.filter(pk=row["pk"])
            .alias(**{f"{name}__ciphertext": Cast(name, output_field=TextField())})
            .filter(**{f"{name}__ciphertext": ciphertext})
            .update(**{name: Value(rotated, output_field=TextField())})  # already ciphertext: no field encryption
        )
        if updated:
            counts.rotated += 1
        else:
            counts.current += 1
    return counts


class Command(BaseCommand):
    help = "Re-encrypt every stored secret under the newest ENCRYPTION_KEYS key, in batches."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--batch-size", type=int, default=200, help="Rows per transaction (default 200).")

    def handle(self, *args: Any, batch_size: int, **options: Any) -> None:
        if batch_size < 1:
            raise CommandError("--batch-size must be 1 or more.")
        total = RotationCounts()
        for model in apps.get_app_config("agent_persistence").get_models():
            if not encrypted_fields(model):
                continue
            counts = rotate_model(model, batch_size)
            total.add(counts)
            self.stdout.write(
                f"{model._meta.label}: {counts.rotated} rotated, {counts.current} already current, {counts.unreadable} unreadable."
            )
        self.stdout.write(
            f"Total: {total.rotated} rotated, {total.current} already current, {total.unreadable} unreadable."
        )
        if total.unreadable:
            raise CommandError(f"{total.unreadable} secret(s) could not be decrypted with any configured key; they were left as they are.")
