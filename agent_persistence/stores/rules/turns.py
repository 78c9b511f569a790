"""The backend-neutral rules of the turns concern: what both store families check and build the same way.

The ORM store (:mod:`agent_persistence.stores.turns`) and its in-memory twin
import these; nothing here reads or writes a table.
"""

from __future__ import annotations

import uuid
from typing import Any, Collection

from ...exceptions import Busy, Gone, NotFound, Validation
from ...models import Conversation
from ...scope import Scope
from ..protocols import Seal, TurnView
from .base import check_scope, lookup_id, parse_id
from .fencing import clean_lease_epoch

#: The error of a run whose producer stopped heartbeating.
PRODUCER_LOST = {"code": "producer_lost", "message": "The process producing this turn stopped."}


#: The error of a run whose producer handed the turn off at a shutdown (the turn goes on in another run).
HANDED_OFF = {"code": "handed_off", "message": "The process producing this turn shut down and handed it off."}


#: The error of a run an operator released.
FORCE_RELEASED = {"code": "force_released", "message": "An operator released this conversation."}


#: The error of a run the turn left open when it ended: a subagent parked at an interrupt and never continued.
TURN_ENDED = {"code": "turn_ended", "message": "The turn ended without continuing this run."}


def event_data(message_id: uuid.UUID, run_id: uuid.UUID | None = None, **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"message_id": str(message_id)}
    if run_id is not None:
        data["run_id"] = str(run_id)
    data.update({key: value for key, value in extra.items() if value is not None})
    return data


def running_event(message_id: uuid.UUID, run_id: uuid.UUID, epoch: int, **extra: Any) -> dict[str, Any]:
    return {"type": "status_running", "data": event_data(message_id, run_id, epoch=epoch, **extra)}


def lost_event(message_id: uuid.UUID, epoch: int) -> dict[str, Any]:
    return {"type": "producer_lost", "data": {"message_id": str(message_id), "epoch": epoch}}


#: What a hand-off may report it had in flight: a model call or a tool call, which the next producer makes again.
IN_FLIGHT = ("model", "tool")


def clean_in_flight(value: Any) -> str | None:
    if value is not None and value not in IN_FLIGHT:
        raise Validation(f"in_flight must be one of {', '.join(IN_FLIGHT)}, or None.", field="in_flight")
    return value


def clean_hand_off(scope: Scope, conversation_id: Any, *, message_id: Any, run_id: Any, epoch: int,
                   in_flight: str | None = None) -> tuple[Scope, uuid.UUID, uuid.UUID, uuid.UUID, int, str | None]:
    """The checked arguments of one hand-off (``TurnStore.hand_off``, an item of ``hand_off_many``)."""
    check_scope(scope)
    return (scope, lookup_id(conversation_id), parse_id(message_id, "message_id"), parse_id(run_id, "run_id"),
            clean_lease_epoch(epoch), clean_in_flight(in_flight))


def clean_claims(claims: Any) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """The ``(conversation id, message id)`` of each item of ``TurnStore.resume_many``, sorted by conversation.

    Validation for a list that is not one of mappings with both ids, or that names a conversation twice.
    """
    if not isinstance(claims, list) or not all(isinstance(claim, dict) for claim in claims):
        raise Validation("claims must be a list of {conversation_id, message_id}.")
    items = sorted((parse_id(claim.get("conversation_id"), "conversation_id"), parse_id(claim.get("message_id"), "message_id"))
                   for claim in claims)
    if len({pk for pk, _ in items}) != len(items):
        raise Validation("A conversation appears twice in one batch of claims.")
    return items


def resume_each(store: Any, items: list[tuple[uuid.UUID, uuid.UUID]], replica: str) -> dict[uuid.UUID, Any]:
    """``store.resume`` of each ``(conversation id, message id)`` of ``items`` as its conversation's owner: each
    turn's plan, or its refusal (Busy, Gone, NotFound), as ``resume_many`` answers."""
    claimed: dict[uuid.UUID, Any] = {}
    for pk, message_id in items:
        try:
            claimed[pk] = store.resume(store.scope_of(pk), pk, message_id=message_id, replica=replica)
        except (Busy, Gone, NotFound) as exc:
            claimed[pk] = exc
    return claimed


def handed_off_event(message_id: uuid.UUID, run_id: uuid.UUID, epoch: int, released_at: int,
                     in_flight: str | None = None) -> dict[str, Any]:
    """The turn's producer (``epoch``) released it at a shutdown, at ``released_at`` (its epoch + 1)."""
    return {"type": "handed_off", "data": event_data(message_id, run_id, epoch=epoch, released_at=released_at,
                                                     in_flight=in_flight)}


def idle_event(message_id: uuid.UUID, run_id: uuid.UUID | None, stop_reason: str,
               error: dict[str, str] | None = None) -> dict[str, Any]:
    return {"type": "status_idle", "data": event_data(message_id, run_id, stop_reason=stop_reason, error=error)}


def clean_seal(seal: Any) -> Seal:
    if not isinstance(seal, Seal):
        raise TypeError("seal must be a Seal.")
    return seal


def clean_known_agents(known_agents: Any) -> frozenset[str]:
    if isinstance(known_agents, str) or not isinstance(known_agents, Collection):
        raise TypeError("known_agents must be a collection of agent names.")
    return frozenset(name for name in known_agents if isinstance(name, str))


def unknown_agent(name: str) -> Validation:
    return Validation(f"No agent is registered as {name!r}.", code="unknown_agent", field="agent")


def announce(scope: Scope, conversation_id: uuid.UUID, message_id: uuid.UUID, run_id: uuid.UUID | None,
             view: TurnView | None = None) -> None:
    """``conversation_updated`` (ids only), once the transaction that sealed the turn has committed.

    ``view`` is the sealed turn as :meth:`TurnStore.read_turn` would read it now; receivers in this
    process get it from :func:`agent_persistence.signals.sealed_view` during the send.
    """
    from ...signals import conversation_updated, sealing

    with sealing(view):
        conversation_updated.send(
            sender=Conversation, tenant=scope.tenant, conversation_id=conversation_id, message_id=message_id, run_id=run_id
        )
