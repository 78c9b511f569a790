"""The shipped websocket ticket store against its contract suite (the in-memory one runs in tests/test_memory_stores.py)."""

from __future__ import annotations

from agent_persistence.testing.tickets import TicketStoreContract


class TestTicketStore(TicketStoreContract):
    pass
