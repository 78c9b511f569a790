"""The shipped TurnStore against its contract suite."""

from __future__ import annotations

from agent_persistence.testing.turns import TurnStoreContract


class TestTurnStore(TurnStoreContract):
    pass
