"""The system checks of the blob settings and of the artifact stores' family."""

from __future__ import annotations

from typing import Any

from agent_persistence.checks import check_blob_settings, check_store_families


def ids(settings: Any, **values: Any) -> list[str]:
    """The ids the check reports with ``values`` over the test settings (each call starts from them)."""
    from tests.settings import AGENT_PERSISTENCE

    settings.AGENT_PERSISTENCE = {**AGENT_PERSISTENCE, **values}
    return [message.id for message in check_blob_settings()]


def test_the_shipped_settings_pass(settings: Any) -> None:
    assert ids(settings) == []


def test_bad_blob_settings(settings: Any) -> None:
    assert ids(settings, BLOB_STORAGE="nowhere") == ["agent_persistence.E005"]
    for limit in (0, -1, 1.5, "10", True):
        assert ids(settings, MAX_BLOB_BYTES=limit) == ["agent_persistence.E003"], limit


def test_artifacts_of_another_family_than_the_conversations(settings: Any) -> None:
    """The deprecated ARTIFACT_STORE key, swapped alone, mixes families: E011 (check_store_families)."""
    memory = "agent_persistence.stores.memory.artifacts.MemoryArtifactStore"
    assert ids(settings, ARTIFACT_STORE=memory) == []
    (error,) = check_store_families()
    assert error.id == "agent_persistence.E011" and "ARTIFACT_STORE" in error.msg
