"""The shipped lease store against its contract suite."""

from __future__ import annotations

from agent_persistence.testing.leases import LeaseStoreContract


class TestLeaseStore(LeaseStoreContract):
    pass
