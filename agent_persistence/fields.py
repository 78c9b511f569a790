"""Model fields: secrets encrypted at rest with a rotating Fernet key ring, and JSON kept as text.

:class:`EncryptedTextField` stores ``MultiFernet`` tokens; the first key of
``AGENT_PERSISTENCE["ENCRYPTION_KEYS"]`` encrypts, every key decrypts, so a new
key can be put in front and old rows re-encrypted at leisure
(``manage.py rotate_encryption_keys``). The field never shows its value in a
form, and ``repr()`` of a model never includes it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.core.exceptions import ImproperlyConfigured
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils.crypto import salted_hmac

from .conf import app_settings


class DecryptionFailed(Exception):
    """A stored secret could not be decrypted with any configured key."""


@lru_cache(maxsize=8)
def _key_ring(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(key) for key in keys])


def key_ring() -> MultiFernet:
    keys = app_settings.ENCRYPTION_KEYS
    if isinstance(keys, str):
        keys = [keys]
    if not keys:
        raise ImproperlyConfigured(
            "AGENT_PERSISTENCE['ENCRYPTION_KEYS'] is empty: secrets cannot be stored. "
            "Generate a key with `python -m agent_persistence.keygen`."
        )
    return _key_ring(tuple(keys))


def encrypt(plaintext: str) -> str:
    return key_ring().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return key_ring().decrypt(token.encode()).decode()
    except (InvalidToken, ValueError, TypeError) as exc:
        raise DecryptionFailed("A stored secret could not be decrypted with the configured keys.") from exc


def rotate(token: str) -> str:
    """Re-encrypt a stored token under the newest key."""
    try:
        return key_ring().rotate(token.encode()).decode()
    except (InvalidToken, ValueError, TypeError) as exc:
        raise DecryptionFailed("A stored secret could not be decrypted with the configured keys.") from exc


def digest(value: str) -> str:
    """A keyed SHA-256 digest for looking a secret up without storing it.

    Keyed with ``SECRET_KEY`` (Django's ``salted_hmac``), so a dump of the table
    does not allow checking guesses offline.
    """
    return salted_hmac("agent_persistence.digest", value, algorithm="sha256").hexdigest()


class EncryptedTextField(models.TextField):
    """A text field whose value is encrypted on save and decrypted on load."""

    description = "Text encrypted at rest"

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> str | None:
        if value is None:
            return None
        return decrypt(value)

    def get_prep_value(self, value: Any) -> str | None:
        value = super().get_prep_value(value)
        if value is None:
            return None
        return encrypt(value)

    def formfield(self, **kwargs: Any) -> Any:
        from django import forms

        kwargs.setdefault("widget", forms.PasswordInput(render_value=False))
        return super().formfield(**kwargs)


class JSONTextField(models.TextField):
    """A JSON object kept as its text: written as given, parsed once on read, never re-parsed by the server.

    For blobs written whole and read whole (agent checkpoints): the database
    stores the UTF-8 text the store already encoded (no ``jsonb`` parse on
    PostgreSQL, no ``JSON_VALID`` check on SQLite, no second ``json.dumps``),
    and a read is one ``json.loads``. A ``str`` given to the field is taken as
    JSON text already encoded (and checked) by its store; any other value is
    encoded here.
    """

    description = "A JSON value stored as text"

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, memoryview):
            value = bytes(value)
        return json.loads(value)

    def to_python(self, value: Any) -> Any:
        if isinstance(value, (str, bytes)):
            return json.loads(value)
        return value

    def get_prep_value(self, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        return json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False, separators=(",", ":"))

    def value_to_string(self, obj: Any) -> str:
        return self.get_prep_value(self.value_from_object(obj))
