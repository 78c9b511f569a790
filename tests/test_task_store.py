"""The shipped TaskStore against its contract suite."""

from __future__ import annotations

from agent_persistence.testing.tasks import TaskStoreContract


class TestTaskStore(TaskStoreContract):
    pass
