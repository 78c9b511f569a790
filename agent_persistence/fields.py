"""Model fields: secrets encrypted at rest with a rotating Fernet key ring.

:class:`EncryptedTextField` stores ``MultiFernet`` tokens; the first key of
``AGENT_PERSISTENCE["ENCRYPTION_KEYS"]`` encrypts, every key decrypts, so a new
key can be put in front and old rows re-encrypted at leisure
(``manage.py rotate_encryption_keys``). The field never shows its value in a
form, and ``repr()`` of a model never includes it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.core.exceptions import ImproperlyConfigured
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
