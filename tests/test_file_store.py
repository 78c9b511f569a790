"""The shipped FileStore against its contract suite."""

from __future__ import annotations

from agent_persistence.testing.files import FileStoreContract


class TestFileStore(FileStoreContract):
    pass
