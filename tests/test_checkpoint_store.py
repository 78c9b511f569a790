"""The shipped CheckpointStore against its contract."""

from __future__ import annotations

from agent_persistence.testing.checkpoints import CheckpointStoreContract


class TestCheckpointStore(CheckpointStoreContract):
    pass
