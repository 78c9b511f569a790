"""The shipped event store against its contract suite."""

from __future__ import annotations

from agent_persistence.testing.events import EventStoreContract


class TestEventStore(EventStoreContract):
    pass
