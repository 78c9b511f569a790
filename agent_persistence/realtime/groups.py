"""Channel-layer group names and message types.

- :func:`conversation_group`: one group per conversation. Nothing of this app
  joins it; the end of each turn (``conversation_updated``) is sent to it, for
  the host's own consumers that join it.
- :data:`RELAYS_GROUP`: the one group every process's relay joins (see
  :mod:`.delivery`). Each flush of a process's group sender is one message to
  it, carrying the updates of every conversation in the flush, and each relay
  probes the layer with a message to it.
- :data:`HANDOFFS_GROUP`: the group every process's reaper joins (see
  :mod:`.handoffs`): a process that hands a turn off at its shutdown sends it
  the turn, and a survivor claims it at once.

Conversation ids are UUIDs, so the hex form keeps a name within Channels'
rules (ASCII letters, digits, hyphens, underscores and periods, under 100).
"""

from __future__ import annotations

import uuid

#: The ``type`` of a message to a conversation's group (one update of that conversation: a seal).
UPDATE_TYPE = "agent_persistence.update"
#: The ``type`` of a message to :data:`RELAYS_GROUP` that carries a batch of updates.
BATCH_TYPE = "agent_persistence.batch"
#: The ``type`` of a relay's probe, sent to :data:`RELAYS_GROUP` (see :class:`.delivery.Relay`).
PROBE_TYPE = "agent_persistence.probe"
#: The group of every process's relay.
RELAYS_GROUP = "agent_persistence.relays"
#: The group of every process's hand-off listener (the reaper's companion, :mod:`.handoffs`).
HANDOFFS_GROUP = "agent_persistence.handoffs"


def conversation_group(conversation_id: uuid.UUID) -> str:
    return f"agent_persistence.conversation.{conversation_id.hex}"
