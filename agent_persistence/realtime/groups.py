"""Channel-layer group names: one group per conversation.

Conversation ids are UUIDs, so the hex form keeps a name within Channels'
rules (ASCII letters, digits, hyphens, underscores and periods, under 100).
"""

from __future__ import annotations

import uuid

#: The ``type`` of a group message (received by each process's relay, see :mod:`.delivery`).
UPDATE_TYPE = "agent_persistence.update"
#: The ``type`` of a relay's probe, sent to a group only that relay joins (see :class:`.delivery.Relay`).
PROBE_TYPE = "agent_persistence.probe"


def conversation_group(conversation_id: uuid.UUID) -> str:
    return f"agent_persistence.conversation.{conversation_id.hex}"
