"""The activity store against its contract: the ORM store on the configured database, and its in-memory twin."""

from __future__ import annotations

from typing import Any

import pytest

from agent_persistence.testing.activities import ActivityStoreContract
from agent_persistence.testing.family import Stores, memory_stores


class TestActivityStore(ActivityStoreContract):
    pass


class TestMemoryActivityStore(ActivityStoreContract):
    def make_stores(self) -> Stores:
        return memory_stores()

    @pytest.fixture(autouse=True)
    def no_database(self, stores: Any, django_db_blocker: Any) -> Any:
        with django_db_blocker.block():
            yield


@pytest.mark.django_db
def test_the_admin_lists_activity_rows_and_metadata_entries_read_only(admin_client: Any) -> None:
    from django.urls import reverse

    from agent_persistence.scope import Scope
    from agent_persistence.stores.activities import ActivityStore
    from agent_persistence.stores.conversations import ConversationStore
    from agent_persistence.stores.metadata import MetadataStore

    scope = Scope("acme", "alice")
    conversation = ConversationStore().create(scope)
    ActivityStore().save(scope, conversation.pk, [{"activity_type": "web_search", "content": {"found": 1}}])
    MetadataStore().set(scope, "compaction", "thread-1", {"upto": 3})
    for model in ("activity", "metadataentry"):
        changelist = admin_client.get(reverse(f"admin:agent_persistence_{model}_changelist"))
        assert changelist.status_code == 200
        assert reverse(f"admin:agent_persistence_{model}_add") not in changelist.content.decode()
    assert "web_search" in admin_client.get(reverse("admin:agent_persistence_activity_changelist")).content.decode()
    assert "thread-1" in admin_client.get(reverse("admin:agent_persistence_metadataentry_changelist")).content.decode()
