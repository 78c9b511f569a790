"""The shipped interrupt store against its contract, on the configured database."""

from __future__ import annotations

from agent_persistence.testing.interrupts import InterruptStoreContract


class TestInterruptStore(InterruptStoreContract):
    pass
