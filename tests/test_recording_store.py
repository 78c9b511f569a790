"""The shipped RecordingStore against its contract, and its guard against a newer epoch's record."""

from __future__ import annotations

import uuid

import pytest

from agent_persistence.models import Conversation, StreamRecording
from agent_persistence.stores.recordings import RecordingStore
from agent_persistence.stores.supervision import SupervisionStore
from agent_persistence.testing.actors import ALICE
from agent_persistence.testing.recordings import RecordingStoreContract, flush_record


class TestRecordingStore(RecordingStoreContract):
    pass


@pytest.mark.django_db
def test_a_record_of_a_newer_epoch_is_never_overwritten() -> None:
    """A record from a later epoch (as a writer outside this store could leave it) wins over put and put_many."""
    conversation = Conversation.objects.create(tenant=ALICE.tenant, owner=ALICE.user)
    claim = SupervisionStore().claim(ALICE, conversation.pk, message_id=uuid.uuid4())
    StreamRecording.objects.create(conversation=conversation, message_id=uuid.uuid4(), index=7, epoch=5)
    store = RecordingStore()
    before = StreamRecording.objects.values().get(pk=conversation.pk)
    assert store.put(conversation.pk, message_id=claim.message_id, index=8, message={}, epoch=claim.epoch) is False
    assert store.put_many([flush_record(conversation.pk, claim.message_id, 9, epoch=claim.epoch)]) == {conversation.pk}
    assert StreamRecording.objects.values().get(pk=conversation.pk) == before
