"""The in-memory metadata store: namespaced key/value entries of each tenant, in one dict."""

from __future__ import annotations

import copy
from typing import Any

from django.utils import timezone

from ...models import MetadataEntry
from ...scope import Scope
from ..protocols import MetadataStoreProtocol
from ..rules.base import check_scope
from ..rules.metadata import clean_name, encode_value
from ..twins import twins_of
from .database import DEFAULT_DATABASE, MemoryDatabase


class MemoryMetadataStore(twins_of(MetadataStoreProtocol)):
    """Namespaced key/value entries of each tenant, in a :class:`MemoryDatabase`."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.db = database or DEFAULT_DATABASE

    def _key(self, scope: Scope, namespace: str, key: str) -> tuple[str, str, str]:
        check_scope(scope)
        return scope.tenant, clean_name(namespace, "namespace"), clean_name(key, "key")

    def get(self, scope: Scope, namespace: str, key: str, default: Any = None) -> Any:
        entry_key = self._key(scope, namespace, key)
        with self.db.lock:
            entry = self.db.metadata.get(entry_key)
            return default if entry is None else copy.deepcopy(entry.value)

    def set(self, scope: Scope, namespace: str, key: str, value: Any) -> Any:
        entry_key = self._key(scope, namespace, key)
        cleaned, _, size = encode_value(value)
        now = timezone.now()
        with self.db.lock:
            previous = self.db.metadata.get(entry_key)
            self.db.metadata[entry_key] = MetadataEntry(
                tenant=entry_key[0], namespace=entry_key[1], key=entry_key[2], value=copy.deepcopy(cleaned), size=size,
                created_at=now if previous is None else previous.created_at, updated_at=now,
            )
        return cleaned

    def delete(self, scope: Scope, namespace: str, key: str) -> bool:
        entry_key = self._key(scope, namespace, key)
        with self.db.lock:
            return self.db.metadata.pop(entry_key, None) is not None
