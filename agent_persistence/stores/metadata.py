"""The metadata store: namespaced key/value state of a tenant, for middleware (validated compaction checkpoints).

A value lives under (tenant, namespace, key): the same key in two namespaces
is two independent values, and no call reaches another tenant's. Values are
any JSON value (``null`` included), cleaned by the JSON policy and at most
``MAX_STATE_BYTES`` of JSON. ``set`` is one upsert statement, so of
concurrent sets of one key the last to commit wins and none fails.

The store is tenant-wide by design: every user of a tenant reads the same
value (the scope's ``user`` is not part of the key), and no endpoint exposes
it; it is state for server-side code.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from ..models import MetadataEntry
from ..scope import Scope
from .base import check_scope
from .protocols import MetadataStoreProtocol
from .rules.metadata import (  # re-exported: these rules moved to agent_persistence/stores/rules/metadata.py
    MAX_NAME_LENGTH as MAX_NAME_LENGTH,
)
from .rules.metadata import (
    clean_name,
    encode_value,
)
from .twins import twins_of


class MetadataStore(twins_of(MetadataStoreProtocol)):
    """Namespaced key/value entries of each tenant, on the Django ORM."""

    def get(self, scope: Scope, namespace: str, key: str, default: Any = None) -> Any:
        """The value stored under ``namespace`` / ``key`` in the scope's tenant; ``default`` when none is."""
        check_scope(scope)
        entry = MetadataEntry.objects.filter(
            tenant=scope.tenant, namespace=clean_name(namespace, "namespace"), key=clean_name(key, "key")
        ).only("value").first()
        return default if entry is None else entry.value

    def set(self, scope: Scope, namespace: str, key: str, value: Any) -> Any:
        """Store ``value`` under ``namespace`` / ``key`` (replacing any); the value as it is stored.

        One ``INSERT ... ON CONFLICT DO UPDATE``: concurrent sets never fail,
        the last to commit wins.
        """
        check_scope(scope)
        namespace, key = clean_name(namespace, "namespace"), clean_name(key, "key")
        cleaned, text, size = encode_value(value)
        now = timezone.now()
        MetadataEntry.objects.bulk_create(
            [MetadataEntry(tenant=scope.tenant, namespace=namespace, key=key, value=text, size=size,
                           created_at=now, updated_at=now)],
            update_conflicts=True,
            unique_fields=["tenant", "namespace", "key"],
            update_fields=["value", "size", "updated_at"],
        )
        return cleaned

    def delete(self, scope: Scope, namespace: str, key: str) -> bool:
        """Remove the value under ``namespace`` / ``key``; whether there was one."""
        check_scope(scope)
        deleted, _ = MetadataEntry.objects.filter(
            tenant=scope.tenant, namespace=clean_name(namespace, "namespace"), key=clean_name(key, "key")
        ).delete()
        return bool(deleted)
