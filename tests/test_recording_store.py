"""The shipped RecordingStore against its contract."""

from __future__ import annotations

from agent_persistence.testing.recordings import RecordingStoreContract


class TestRecordingStore(RecordingStoreContract):
    pass
