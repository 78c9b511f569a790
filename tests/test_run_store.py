"""The shipped run store against its contract, on the configured database."""

from __future__ import annotations

from agent_persistence.testing.runs import RunStoreContract


class TestRunStore(RunStoreContract):
    pass
