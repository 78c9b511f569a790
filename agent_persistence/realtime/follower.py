"""Following a conversation's turns for one socket: catch-up, live updates, final state.

A :class:`Follower` keeps what its client has: the turn (``message_id``), the
producer ``epoch`` and ``index`` of the last update sent, and ``offset``, the
length of the text the client holds. Every source of updates goes through
one queue and one task, so frames leave in order:

- live updates from the hub (this process) or the channel layer (other
  processes), see :mod:`.delivery`;
- reads of the turn (supervision row, recording, final message, pending
  interrupts) at attach time and then at the pace of
  :meth:`Follower.poll_interval`: for a live turn every
  ``RECORDING_FLUSH_INTERVAL`` when no live source covers it (the layer does
  not span processes, or the relay finds it down, and no producer of this
  process streamed lately), and every ``DEAD_AFTER / 2`` otherwise, as a
  safety net that also notices a dead producer, skipped while live updates
  keep coming; for a dead turn, every ``DEAD_AFTER`` while the relay covers
  it (its seal, from whatever process, is pushed) and at least every
  second otherwise; for a conversation with no turn running, never while the
  relay covers it (the next turn wakes the follower with a layer message),
  and with back-off up to ``WEBSOCKET_IDLE_POLL_MAX`` when nothing does.

Access is checked again at every attach and before the follower switches
to a turn the client has not seen; a read that finds the conversation no
longer readable ends the follower with :class:`AccessLost` (the consumer
closes the socket with 4404). The periodic check of idle sockets is
:mod:`.sockets`.

An update is applied only if it is newer: a higher epoch, or the same epoch
and a higher index (a resumed producer starts from the recording's index, so
indexes keep rising across a takeover). The text sent is what the client
lacks past its offset, so text a resumed producer streams again is never
sent twice. A hand-off (the producer's process shut down and released the
turn) is a ``handing_off`` status, sent once, before the frames of the
producer that resumes it; one that arrives after them is stale and dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from ..conf import app_settings
from ..exceptions import NotFound
from ..scope import Scope
from ..stores import activity_store, conversation_store, turn_store
from ..stores.rules.activities import activity_as_json
from ..stores.protocols import TurnView
from ..runtime.lifecycle import ensure_reaper
from .delivery import Payload, hub

logger = logging.getLogger(__name__)

Send = Callable[[dict[str, Any]], Awaitable[None]]

#: Live updates a follower holds past a gap (the oldest go first).
MAX_HELD = 1000


@dataclass(frozen=True, slots=True)
class Update:
    """One live update of a turn: ``text`` starts at offset ``base`` of the message."""

    message_id: uuid.UUID
    epoch: int
    index: int
    base: int
    text: str
    tool_calls: list[dict[str, Any]] | None
    run_id: Any = None


#: The longest wait between two reads of a dead turn when no spanning layer covers the conversation: whichever
#: process seals it (a reaper, ``manage.py reap_turns``, a cancel), its followers have the final within this.
DEAD_TURN_POLL_MAX = 1.0

#: Doublings of an idle conversation's poll interval (it stops at ``WEBSOCKET_IDLE_POLL_MAX`` anyway).
MAX_BACK_OFF_STEPS = 16


def read_turn(scope: Scope, conversation_id: uuid.UUID) -> TurnView:
    """What a follower needs to know of the conversation's turn now (access was checked at connect).

    The turn store's read (:meth:`~agent_persistence.stores.turns.TurnStore.read_turn`), unscoped:
    the supervision row, the turn's recording, the final message of a sealed turn, the pending
    interrupts of a parked one; ``run_id`` and ``epoch`` name the run that holds the turn now.
    """
    return turn_store().read_turn(None, conversation_id)


def _read_turn_closing(scope: Scope, conversation_id: uuid.UUID) -> TurnView:
    close_old_connections()
    try:
        return read_turn(scope, conversation_id)
    finally:
        close_old_connections()


def check_readable(scope: Scope, conversation_id: uuid.UUID) -> None:
    """NotFound unless ``scope`` may read the conversation now (the stores' read check)."""
    conversation_store().get(scope, conversation_id)


def _read_turn_checked(scope: Scope, conversation_id: uuid.UUID) -> TurnView:
    close_old_connections()
    try:
        # The scoped read checks access in the same call: NotFound when the scope may no longer read it.
        return turn_store().read_turn(scope, conversation_id)
    finally:
        close_old_connections()


def _check_readable_closing(scope: Scope, conversation_id: uuid.UUID) -> None:
    close_old_connections()
    try:
        check_readable(scope, conversation_id)
    finally:
        close_old_connections()


async def read_turn_async(scope: Scope, conversation_id: uuid.UUID, *, check_access: bool = False) -> TurnView:
    """:func:`read_turn` in a worker thread of its own, not the process's one thread-sensitive
    database thread that producers write on: followers' reads never queue behind their writes.

    With ``check_access`` the read is preceded by :func:`check_readable`. AccessLost when
    ``scope`` may not read the conversation (any read that raises NotFound).
    """
    try:
        return await sync_to_async(_read_turn_checked if check_access else _read_turn_closing, thread_sensitive=False)(
            scope, conversation_id
        )
    except NotFound:
        raise AccessLost from None


async def check_readable_async(scope: Scope, conversation_id: uuid.UUID) -> None:
    """:func:`check_readable` in a worker thread; AccessLost when the check fails."""
    try:
        await sync_to_async(_check_readable_closing, thread_sensitive=False)(scope, conversation_id)
    except NotFound:
        raise AccessLost from None


def _list_activities_closing(scope: Scope, conversation_id: uuid.UUID, message_id: uuid.UUID) -> list[dict[str, Any]]:
    close_old_connections()
    try:
        # Scoped: the store checks that the socket's user may still read the conversation.
        return [activity_as_json(row) for row in activity_store().list(scope, conversation_id, message_id=message_id)]
    finally:
        close_old_connections()


async def list_activities_async(scope: Scope, conversation_id: uuid.UUID, message_id: uuid.UUID) -> list[dict[str, Any]]:
    """The activity rows of one turn, as frames carry them, in a worker thread (as :func:`read_turn_async`)."""
    try:
        return await sync_to_async(_list_activities_closing, thread_sensitive=False)(scope, conversation_id, message_id)
    except NotFound:
        raise AccessLost from None


#: The most text one coalesced delta carries; the rest goes in the next frame.
MAX_COALESCED_TEXT = 64 * 1024


def merge_deltas(first: Payload, second: Payload) -> Payload | None:
    """One delta meaning ``first`` then ``second``, or None when ``second`` does not follow on.

    It follows on when it is a delta of the same turn and producer (message, epoch) whose text
    either starts where ``first``'s ends (the layer's deltas) or starts no later and reaches at
    least as far (the hub's, which carry the whole text so far): the later index wins.
    """
    if second["kind"] != "delta" or (first["message_id"], first["epoch"]) != (second["message_id"], second["epoch"]):
        return None
    if second["index"] <= first["index"]:
        return None
    relayed = bool(first.get("relayed")) and bool(second.get("relayed"))
    first_end = first["offset"] + len(first["text"])
    if second["offset"] <= first["offset"] and second["offset"] + len(second["text"]) >= first_end:
        return {**second, "relayed": relayed}
    if second["offset"] == first_end and len(first["text"]) + len(second["text"]) <= MAX_COALESCED_TEXT:
        return {**second, "offset": first["offset"], "text": first["text"] + second["text"], "relayed": relayed}
    return None


class AccessLost(Exception):
    """The socket's user may no longer read the conversation (it was unshared or deleted)."""


class Coverage(Protocol):
    """Whether the channel layer brings a conversation's updates from other processes (the relay)."""

    def covers(self, conversation_id: uuid.UUID) -> bool: ...


class Follower:
    """Streams one conversation to one client through ``send``.

    ``on_access_lost`` is awaited (in a task of its own) when a read finds the
    conversation no longer readable; ``relay`` is the process's relay when the
    channel layer spans processes.
    """

    def __init__(self, scope: Scope, conversation_id: uuid.UUID, send: Send, *,
                 on_access_lost: Callable[[], Awaitable[None]] | None = None, relay: Coverage | None = None) -> None:
        self.scope = scope
        self.conversation_id = conversation_id
        self.send = send
        self.on_access_lost = on_access_lost
        self.relay = relay
        self.queue: asyncio.Queue[Payload] = asyncio.Queue()
        self.message_id: uuid.UUID | None = None
        self.epoch = 0
        self.index = 0
        self.offset = 0
        self.tool_calls: list[dict[str, Any]] | None = None
        self.status: tuple[Any, ...] | None = None
        self.state: str | None = None  # the turn's state as last sent in a status frame
        self.finalized: set[uuid.UUID] = set()
        self.interrupts_sent: tuple[str, ...] = ()
        self.activity_revisions: dict[str, int] = {}  # activity id -> the revision last sent
        self.last_live = 0.0
        self.last_local = 0.0  # when this process's hub last brought an update of this process's producer
        self.last_read = 0.0
        self.read_requested = False
        self.idle_polls = 0  # reads in a row that found nothing new (the back-off's exponent)
        self.last_seen: tuple[Any, ...] | None = None
        self.switches = 0  # turns switched to so far; a read started before a switch is stale
        self.behind = False
        self.held: list[Update] = []  # live updates past a gap, applied once the recording fills it
        self.task: asyncio.Task[None] | None = None
        self.losing_access: asyncio.Task[None] | None = None
        self.subscription: Any = None
        self.carried: Payload | None = None  # taken from the queue by coalesce() and not merged: the next to apply

    def push(self, payload: Payload) -> None:
        """An update from the hub or the channel layer (called on the consumer's loop)."""
        self.queue.put_nowait(payload)

    def coalesce(self, payload: Payload) -> Payload:
        """``payload`` with the deltas queued right behind it that follow on from it, as one delta.

        Only a follower that fell behind (a busy process) finds more than one delta queued; it then
        sends one frame for all of them instead of one each, so a loaded server spends less per
        chunk exactly when it has less to spend. The first payload that does not follow on is
        carried to the next turn of the loop, so the order never changes.
        """
        while payload["kind"] == "delta" and not self.queue.empty():
            following = self.queue.get_nowait()
            merged = merge_deltas(payload, following)
            if merged is None:
                self.carried = following
                break
            payload = merged
        return payload

    async def attach(self, *, last_index: int | None, offset: int | None, message_id: uuid.UUID | None) -> None:
        """Send the status and the catch-up from the client's position, then follow live.

        Access is checked again first: AccessLost when the user may no longer read the conversation.
        """
        await self.stop()
        ensure_reaper()  # REAPER_ENABLED: a replica that only serves followers reaps dead turns too
        if self.subscription is None:
            # Subscribe before reading, so nothing between the read and the first live update is missed.
            self.subscription = hub.subscribe(self.conversation_id, self.push)
        view = await read_turn_async(self.scope, self.conversation_id, check_access=True)
        self.status = None
        self.finalized.clear()
        self.interrupts_sent = ()
        self.activity_revisions.clear()
        self.held.clear()
        self.last_read, self.idle_polls, self.last_seen = time.monotonic(), 0, None
        self.message_id, self.epoch, self.index, self.offset, self.tool_calls = view.message_id, 0, 0, 0, None
        if view.message_id is not None and message_id in (None, view.message_id) and (last_index or offset):
            known = view.record["index"] if view.record else 0
            if last_index is not None and last_index > known and view.state != "alive":
                await self.send({
                    "type": "error", "code": "index_ahead",
                    "message": f"last_index {last_index} is ahead of the turn's index {known}; sending it from the start.",
                    "field": "last_index",
                })
            else:
                self.index = last_index or 0
                self.offset = offset or 0
        await self.send_status(view.state, view.message_id, view.run_id, view.epoch)
        if view.message_id is not None:  # the turn's activity rows, then its text
            await self.apply_activities(await list_activities_async(self.scope, self.conversation_id, view.message_id))
        await self.apply_view(view, attaching=True)
        self.task = asyncio.get_running_loop().create_task(self.follow(), name=f"agent_persistence.follower.{self.conversation_id}")

    def refresh(self) -> None:
        """Read the turn at once (something changed that no live update brings, e.g. a turn enqueued for a worker)."""
        self.read_requested = True
        self.queue.put_nowait({"kind": "layer"})

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
            except Exception:  # noqa: BLE001 - the follow loop logs its own failures
                logger.debug("The follower of conversation %s ended with an error.", self.conversation_id, exc_info=True)
            self.task = None

    async def close(self) -> None:
        """Stop following for good: no task, no reads, no hub subscription."""
        if self.subscription is not None:
            hub.unsubscribe(self.subscription)
            self.subscription = None
        await self.stop()

    # -- the follow loop --------------------------------------------------------------------------

    def covered(self) -> bool:
        return self.relay is not None and self.relay.covers(self.conversation_id)

    def fed_locally(self) -> bool:
        """Whether the turn runs in this process and its hub brought an update lately (within ``DEAD_AFTER / 2``)."""
        return self.state == "alive" and time.monotonic() - self.last_local < app_settings.DEAD_AFTER / 2

    def poll_interval(self) -> float | None:
        """Seconds between reads of the turn now; None: no reads until an update arrives.

        - behind (a gap to fill): every ``RECORDING_FLUSH_INTERVAL``;
        - a turn alive: every ``DEAD_AFTER / 2`` as a safety net (it also notices a dead
          producer) when the layer or this process's hub delivers it live, else every
          ``RECORDING_FLUSH_INTERVAL``;
        - a dead turn (its producer stopped; whatever process seals it next): every ``DEAD_AFTER`` as a
          safety net while the relay covers it (the seal is pushed), else with back-off up to
          :data:`DEAD_TURN_POLL_MAX` (one second);
        - no turn running (idle, done, errored, interrupted): never while the relay
          covers the conversation (a new turn, a resume or a seal arrives as a layer
          message); otherwise with back-off, doubling from ``RECORDING_FLUSH_INTERVAL`` up
          to ``WEBSOCKET_IDLE_POLL_MAX`` while reads find nothing new.
        """
        flush = app_settings.RECORDING_FLUSH_INTERVAL
        if self.behind:
            return flush
        covered = self.covered()
        if self.state in ("alive", "queued"):  # queued: a worker takes it within moments (TURN_RUNNER "tasks")
            live = covered or time.monotonic() - self.last_live < app_settings.DEAD_AFTER / 2
            return app_settings.DEAD_AFTER / 2 if live else flush
        if self.state in ("dead", "handing_off"):
            # Its seal may come from any process (a reaper, a command, a cancel): with the layer it is pushed
            # (read every DEAD_AFTER as a safety net), without it read at least every DEAD_TURN_POLL_MAX.
            if covered:
                return app_settings.DEAD_AFTER
            return min(flush * 2 ** self.idle_polls, max(flush, DEAD_TURN_POLL_MAX))
        if covered:
            return None
        return min(flush * 2 ** self.idle_polls, max(flush, app_settings.WEBSOCKET_IDLE_POLL_MAX))

    def next_read_at(self) -> float | None:
        """When the next read is due (``time.monotonic()``), None when none is."""
        if self.read_requested:
            return 0.0
        interval = self.poll_interval()
        if interval is None:
            return None
        if self.behind:
            return self.last_read + interval
        # While live updates flow, the turn is alive and nothing is missing: no read needed.
        return max(self.last_read, self.last_live) + interval

    async def follow(self) -> None:
        reading: asyncio.Task[None] | None = None
        try:
            while True:
                now = time.monotonic()
                due = self.next_read_at()
                if due is not None and due <= now:
                    # The read runs beside live delivery: a busy database never holds up the hub.
                    if reading is None or reading.done():
                        reading = asyncio.get_running_loop().create_task(self.read())
                    self.last_read, self.read_requested = now, False
                    due = self.next_read_at()
                if self.carried is not None:
                    payload, self.carried = self.carried, None
                else:
                    try:
                        # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a cancellation
                        # that races its timeout, and the follower would never stop.
                        async with asyncio.timeout(None if due is None else max(0.0, due - now)):
                            payload = await self.queue.get()
                    except TimeoutError:
                        continue
                payload = self.coalesce(payload)
                if payload["kind"] == "access_lost":
                    raise AccessLost
                try:
                    await self.apply_payload(payload)
                except (asyncio.CancelledError, AccessLost):
                    raise
                except Exception:  # noqa: BLE001 - e.g. the client went away mid-send
                    logger.info("Could not deliver an update of conversation %s.", self.conversation_id, exc_info=True)
        except AccessLost:
            if self.on_access_lost is not None:
                # A task of its own (kept, so it is not collected): closing the socket stops this one.
                self.losing_access = asyncio.get_running_loop().create_task(self.on_access_lost())
        finally:
            if reading is not None:
                reading.cancel()

    async def read(self) -> None:
        """Read the turn and queue what was read (a failed read is retried at the next poll)."""
        switches = self.switches
        try:
            view = await read_turn_async(self.scope, self.conversation_id)
        except AccessLost:
            self.queue.put_nowait({"kind": "access_lost"})
            return
        except Exception:  # noqa: BLE001
            logger.warning("Reading the turn of conversation %s failed; retrying.", self.conversation_id, exc_info=True)
            return
        self.queue.put_nowait({"kind": "view", "view": view, "switches": switches})
        if (view.message_id is not None and not self.covered() and not self.fed_locally()
                and (view.state == "alive" or self.seen_of(view) != self.last_seen)):
            # No layer brings other processes' activity frames (and no producer here does): the turn's rows are read with the turn.
            try:
                rows = await list_activities_async(self.scope, self.conversation_id, view.message_id)
            except Exception:  # noqa: BLE001 - read again at the next poll
                logger.warning("Reading the activities of conversation %s failed; retrying.", self.conversation_id, exc_info=True)
                return
            self.queue.put_nowait({"kind": "activities", "activities": rows})

    # -- applying -------------------------------------------------------------------------------------

    async def apply_payload(self, payload: Payload) -> None:
        kind = payload["kind"]
        if kind == "layer":
            # The relay's coverage changed (the layer went down or came back) or it lost a message:
            # read once, for what the layer may have missed, then keep the pace that fits. A turn
            # produced in this process reaches this follower through the hub alone: nothing of it
            # was missed, and an outage read by every such follower at once would only add load.
            if not self.fed_locally():
                self.read_requested = True
            return
        if kind == "view":
            view = payload["view"]
            if view.message_id != self.message_id and payload["switches"] != self.switches:
                return  # read before a newer turn arrived live: stale
            await self.apply_view(view)
            return
        if kind == "sealed":
            # The seal's own view in this process (the hub); read from the database when it came over the layer.
            view = payload.get("view")
            await self.apply_view(view if view is not None else await read_turn_async(self.scope, self.conversation_id))
            return
        if kind == "activities":
            await self.apply_activities(payload["activities"])
            return
        if kind == "handing_off":
            await self.apply_handoff(payload)
            return
        self.last_live = time.monotonic()
        if not payload.get("relayed"):
            self.last_local = self.last_live
        if kind == "activity":
            await self.apply_activity(payload["activity"], epoch=payload["epoch"])
            return
        self.idle_polls = 0
        message_id = uuid.UUID(payload["message_id"])
        await self.advance(message_id, payload["epoch"], payload["index"], payload["offset"], payload["text"], payload["tool_calls"],
                           run_id=payload.get("run_id"))

    async def switch_to(self, message_id: uuid.UUID, state: str = "alive", run_id: Any = None, epoch: int = 0) -> None:
        """A turn the client has not seen: start it from nothing, once the user may still read it."""
        await check_readable_async(self.scope, self.conversation_id)
        self.message_id, self.epoch, self.index, self.offset, self.tool_calls = message_id, 0, 0, 0, None
        self.interrupts_sent = ()
        self.held.clear()
        self.switches += 1
        await self.send_status(state, message_id, run_id, epoch)

    async def send_status(self, state: str, message_id: uuid.UUID | None, run_id: Any, epoch: int) -> None:
        self.state = state
        status = (state, message_id, str(run_id) if run_id else None, epoch)  # run ids come as UUIDs and as text
        if status == self.status:
            return
        self.status = status
        await self.send({
            "type": "status",
            "state": state,
            "message_id": str(message_id) if message_id else None,
            "run_id": str(run_id) if run_id else None,
            "epoch": epoch,
            "index": self.index,
        })

    async def advance(self, message_id: uuid.UUID, epoch: int, index: int, base: int, text: str,
                      tool_calls: list[dict[str, Any]] | None, run_id: Any = None) -> None:
        """Apply the text ``text`` (which starts at ``base``) of ``message_id`` at (``epoch``, ``index``).

        An update that starts past what the client holds (one before it was lost) is held; once
        the recording fills the gap, the held updates that follow on are applied in order, so a
        follower catches up with live delivery at its first read instead of waiting for a read
        that happens to end exactly where a live update starts.
        """
        if await self.apply_update(Update(message_id, epoch, index, base, text, tool_calls, run_id)):
            await self.apply_held()

    def hold(self, update: Update) -> None:
        self.held.append(update)
        if len(self.held) > MAX_HELD:
            self.held.sort(key=lambda held: held.base)
            del self.held[: len(self.held) - MAX_HELD]

    async def apply_held(self) -> None:
        """Apply, in order, the held updates that the client's text now reaches."""
        while self.held:
            self.held.sort(key=lambda held: (held.base, held.index))
            update = self.held[0]
            stale = update.message_id != self.message_id or update.epoch < self.epoch or update.index <= self.index
            if not stale and update.base > self.offset:
                return
            del self.held[0]
            if not stale:
                await self.apply_update(update)

    async def apply_update(self, update: Update) -> bool:
        """Apply one update; whether it was (False when stale, or held past a gap)."""
        message_id, epoch, index, base, text, tool_calls, run_id = (
            update.message_id, update.epoch, update.index, update.base, update.text, update.tool_calls, update.run_id
        )
        if message_id != self.message_id:
            if message_id in self.finalized:
                return False
            await self.switch_to(message_id, "alive", run_id, epoch)
        if message_id in self.finalized or epoch < self.epoch or index <= self.index:
            return False
        if base > self.offset:
            self.behind = True  # an update was missed: the recording fills the gap
            self.hold(update)
            return False
        self.behind = False
        new_text = text[self.offset - base:]
        handed_off = self.state == "handing_off" and self.status is not None and epoch > self.status[3]
        if run_id is not None and ((epoch > self.epoch and self.epoch) or handed_off or self.state == "queued"):
            # (queued: a worker took the turn, TURN_RUNNER "tasks"; its first delta makes it alive.)
            # A resumed producer: every follower learns the run and epoch that hold the turn now.
            await self.send_status("alive", message_id, run_id, epoch)
        self.epoch, self.index = epoch, index
        changed_calls = tool_calls != self.tool_calls
        if not new_text and not changed_calls:
            return True
        frame: dict[str, Any] = {"type": "delta", "message_id": str(message_id), "index": index, "offset": self.offset, "text": new_text}
        if changed_calls:
            frame["tool_calls"] = tool_calls
            self.tool_calls = tool_calls
        self.offset += len(new_text)
        await self.send(frame)
        return True

    async def apply_handoff(self, payload: Payload) -> None:
        """The producer of the turn the client follows released it (its process shut down): a ``handing_off``
        status, unless the client already has the status of a newer producer (the announcement came late)."""
        message_id = uuid.UUID(payload["message_id"])
        status_epoch = self.status[3] if self.status is not None else 0
        if message_id != self.message_id or message_id in self.finalized or payload["epoch"] <= status_epoch:
            return
        await self.send_status("handing_off", message_id, payload["run_id"], payload["epoch"])

    @staticmethod
    def seen_of(view: TurnView) -> tuple[Any, ...]:
        """What of a read tells a follower something new (the idle back-off restarts when it changes)."""
        return (view.state, view.message_id, view.record["index"] if view.record else None, view.final is not None,
                tuple(interrupt["id"] for interrupt in view.interrupts))

    async def apply_activities(self, activities: list[dict[str, Any]]) -> None:
        for activity in activities:
            await self.apply_activity(activity)

    async def apply_activity(self, activity: dict[str, Any], *, epoch: int = 0) -> None:
        """Send an activity row unless the client has it at this revision or a newer one.

        A live row of a turn the client has not seen starts that turn first,
        as its first delta would.
        """
        if activity["revision"] <= self.activity_revisions.get(activity["id"], 0):
            return
        message_id = uuid.UUID(activity["message_id"]) if activity["message_id"] else None
        if message_id is not None and message_id != self.message_id and message_id not in self.finalized and epoch:
            await self.switch_to(message_id, "alive", activity["run_id"], epoch)
        self.activity_revisions[activity["id"]] = activity["revision"]
        await self.send({"type": "activity", **activity})

    async def apply_view(self, view: TurnView, *, attaching: bool = False) -> None:
        seen = self.seen_of(view)
        if not attaching:  # the back-off grows while reads find the same turn
            self.idle_polls = min(self.idle_polls + 1, MAX_BACK_OFF_STEPS) if seen == self.last_seen else 0
        self.last_seen = seen
        if view.message_id is None:
            await self.send_status("idle", None, None, view.epoch)
            return
        if view.message_id != self.message_id:
            await self.switch_to(view.message_id, view.state, view.run_id, view.epoch)
        if view.record is not None:
            record = view.record
            message = record["message"]
            await self.advance(view.message_id, record["epoch"], record["index"], 0, message.get("content", ""), message.get("tool_calls"))
        if view.final is not None and view.message_id not in self.finalized:
            self.finalized.add(view.message_id)
            final = view.final
            frame = {"type": "final", "message_id": str(view.message_id), "index": self.index, "message": final["message"],
                     "stop_reason": final["stop_reason"]}
            if final["error"]:
                frame["error"] = final["error"]
            self.behind = False
            self.held.clear()
            self.offset = len(final["message"].get("content", ""))
            await self.send(frame)
            await self.send_status(view.state, view.message_id, view.run_id, view.epoch)
            if not attaching:
                await self.send({
                    "type": "conversation_updated",
                    "conversation_id": str(self.conversation_id),
                    "message_id": str(view.message_id),
                    "run_id": str(view.run_id) if view.run_id else None,
                })
        elif not (self.status is not None and self.status[1] == view.message_id and view.epoch < self.status[3]):
            # (A read that started before a newer producer's status was sent is stale: the turn's epoch never falls.)
            await self.send_status(view.state, view.message_id, view.run_id, view.epoch)
        interrupts = tuple(interrupt["id"] for interrupt in view.interrupts)
        if interrupts and interrupts != self.interrupts_sent:
            self.interrupts_sent = interrupts
            await self.send({"type": "interrupt", "message_id": str(view.message_id), "interrupts": view.interrupts})
