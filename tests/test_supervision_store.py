"""The shipped SupervisionStore against its contract."""

from __future__ import annotations

from agent_persistence.testing.supervision import SupervisionStoreContract


class TestSupervisionStore(SupervisionStoreContract):
    pass
