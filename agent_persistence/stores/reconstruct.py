"""Reconstruct for reload: everything a client needs to repaint a conversation, in one call.

:func:`reconstruct` reads, through the configured stores (or the family it is
given), what a page reload has lost: the conversation, the newest page of its
transcript (or the page before a cursor), its activity rows, one subagent card
per child run of the page's turns (with the child's own transcript, the run's
``transcript``, and nested cards), the pending interrupts, and the turn to
tail when one is running.

It is several reads, not one snapshot. The turn is read first: a turn that
ends meanwhile reads as still running, and the client that attaches to tail
it gets its final state from the socket; nothing is missed, at worst a row is
painted twice and replaced by id.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from ..conf import app_settings
from ..exceptions import NotFound
from ..scope import Scope
from ..statuses import InterruptStatus
from .base import Page, check_scope, healed

if TYPE_CHECKING:
    from ..models import Activity, Conversation, Interrupt, Message, Run
    from .protocols import TurnView

#: Turn states with a producer to tail (alive, or handing_off: another server takes it on at once) or to resume (dead).
RUNNING_STATES = frozenset({"queued", "alive", "dead", "handing_off"})
#: Turn states whose assistant message may not be written yet (running, or parked on a question).
UNSEALED_STATES = RUNNING_STATES | {"interrupted"}
#: Nesting of subagent cards beyond which children are not followed (a guard, not a limit anyone meets).
MAX_CARD_DEPTH = 16


@dataclass(frozen=True)
class SubagentCard:
    """A child run shown on its parent's assistant message: the run, its own transcript, its own children."""

    run: Run
    messages: list[dict[str, Any]]
    children: list[SubagentCard] = field(default_factory=list)


@dataclass(frozen=True)
class Reconstruction:
    """What :func:`reconstruct` returns; ``live_turn`` is None unless a turn is running (alive or dead)."""

    conversation: Conversation
    messages: Page[Message]
    activities: list[Activity]
    subagents: list[SubagentCard]
    interrupts: list[Interrupt]
    live_turn: TurnView | None


def configured_stores() -> Any:
    """The configured stores, under the names :func:`reconstruct` reads (those of ``testing.family.Stores``)."""
    from . import activity_store, conversation_store, interrupt_store, run_store, turn_store

    return SimpleNamespace(
        conversations=conversation_store(), activities=activity_store(), runs=run_store(),
        interrupts=interrupt_store(), turns=turn_store(),
    )


# -- the reads -------------------------------------------------------------------------------


def child_runs(stores: Any, scope: Scope, run_id: uuid.UUID) -> list[Run]:
    """The direct child runs (subagents) of a run, oldest first."""
    return stores.runs.list_by_parent_run(scope, run_id)


def pending_interrupts(stores: Any, scope: Scope, conversation_id: uuid.UUID) -> list[Interrupt]:
    """The conversation's pending interrupts (every run's, subagents' included), oldest first."""
    return stores.interrupts.list(scope, conversation_id, status=InterruptStatus.PENDING.value)


# -- the call -------------------------------------------------------------------------------


def reconstruct(
    scope: Scope, conversation_id: Any, *, limit: int | None = None, before: Any = None, stores: Any = None
) -> Reconstruction:
    """What a client needs to repaint the conversation after a reload; NotFound unless ``scope`` may read it.

    ``messages`` is the newest page of ``limit`` messages (``DEFAULT_PAGE_SIZE``
    by default), or the page just before the message ``before``, oldest
    first; its ``has_more`` says that older messages exist. ``subagents`` has
    one card per child run of the top-level runs of that page's turns; the
    newest page's turns include the running or parked turn whose assistant
    message is not written yet (a subagent waiting on its own question).
    """
    check_scope(scope)
    stores = stores or configured_stores()
    turn = stores.turns.read_turn(scope, conversation_id)
    conversation = stores.conversations.get(scope, conversation_id)
    newest_first = stores.conversations.list_messages(scope, conversation.pk, limit=limit, order="desc", before=before)
    page = Page(items=newest_first.items[::-1], total=newest_first.total, limit=newest_first.limit, offset=newest_first.offset,
                has_more=newest_first.has_more)
    turns_on_page = {message.id for message in page.items}
    if before is None and _unwritten_turn(stores, scope, conversation.pk, turn, turns_on_page):
        turns_on_page.add(turn.message_id)  # the newest page ends with the turn that is being written
    runs = stores.runs.list(scope, conversation.pk, limit=int(app_settings.MAX_PAGE_SIZE)).items
    parents = sorted((run for run in runs if run.parent_id is None and run.message_id in turns_on_page),
                     key=lambda run: (run.started_at, run.pk))
    tree = {parent.pk: _children(stores, scope, parent.pk, depth=1, seen={parent.pk}) for parent in parents}
    return Reconstruction(
        conversation=conversation,
        messages=page,
        activities=stores.activities.list(scope, conversation.pk),
        subagents=[_card(run, children) for parent in parents for run, children in tree[parent.pk]],
        interrupts=pending_interrupts(stores, scope, conversation.pk),
        live_turn=turn if turn.state in RUNNING_STATES else None,
    )


async def areconstruct(scope: Scope, conversation_id: Any, **options: Any) -> Reconstruction:
    """Async twin of :func:`reconstruct` (in Django's sync thread, its connections healed first)."""
    return await sync_to_async(healed(reconstruct))(scope, conversation_id, **options)


Tree = list[tuple["Run", "Tree"]]


def _unwritten_turn(stores: Any, scope: Scope, conversation_id: uuid.UUID, turn: TurnView, on_page: set[Any]) -> bool:
    """Whether ``turn`` runs or is parked and its assistant message is not in the conversation (yet)."""
    if turn.state not in UNSEALED_STATES or turn.message_id is None or turn.message_id in on_page:
        return False
    try:
        stores.conversations.get_message(scope, conversation_id, turn.message_id)
    except NotFound:
        return True
    return False  # written, on an older page


def _children(stores: Any, scope: Scope, run_id: uuid.UUID, *, depth: int, seen: set[uuid.UUID]) -> Tree:
    if depth > MAX_CARD_DEPTH:
        return []
    tree: Tree = []
    for child in child_runs(stores, scope, run_id):
        if child.pk in seen:
            continue
        seen.add(child.pk)
        tree.append((child, _children(stores, scope, child.pk, depth=depth + 1, seen=seen)))
    return tree


def _card(run: Run, children: Tree) -> SubagentCard:
    return SubagentCard(run=run, messages=list(run.transcript or []),
                        children=[_card(child, grandchildren) for child, grandchildren in children])
