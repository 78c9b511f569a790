"""The shipped ConversationStore against its contract suite."""

from __future__ import annotations

from agent_persistence.testing.conversations import ConversationStoreContract


class TestConversationStore(ConversationStoreContract):
    pass
