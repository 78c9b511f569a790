"""The shipped CheckpointStore against its contract, and its guard against a newer epoch's row."""

from __future__ import annotations

import uuid

import pytest

from agent_persistence.exceptions import Fenced
from agent_persistence.models import AgentCheckpoint, Conversation
from agent_persistence.stores.checkpoints import CheckpointStore
from agent_persistence.stores.supervision import SupervisionStore
from agent_persistence.testing.actors import ALICE
from agent_persistence.testing.checkpoints import CheckpointStoreContract


class TestCheckpointStore(CheckpointStoreContract):
    pass


@pytest.mark.django_db
def test_a_save_is_fenced_when_a_newer_epoch_saved_the_checkpoint() -> None:
    """A checkpoint row from a later epoch (as a writer outside this store could leave it) is never overwritten."""
    conversation = Conversation.objects.create(tenant=ALICE.tenant, owner=ALICE.user)
    claim = SupervisionStore().claim(ALICE, conversation.pk, message_id=uuid.uuid4())
    AgentCheckpoint.objects.create(conversation=conversation, state={"by": "newer"}, epoch=7)
    store = CheckpointStore()
    with pytest.raises(Fenced):
        store.save(conversation.pk, {"by": "older"}, epoch=claim.epoch)
    assert store.load(conversation.pk) == {"by": "newer"}
