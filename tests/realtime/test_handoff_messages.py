"""What the hand-off listener reads off the reapers' group: one flush's hand-offs, or one; garbage dropped."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agent_persistence.realtime.delivery import handoffs_message
from agent_persistence.realtime.handoffs import (
    BACKUP_DELAY,
    PRESENCE_TTL,
    Listeners,
    _claim,
    announcements,
    claim_delay,
    presence,
)


def announcement(origin: str = "web-1:1") -> dict[str, Any]:
    return {"type": "update", "origin": origin, "conversation_id": str(uuid.uuid4()),
            "payload": {"kind": "handing_off", "message_id": str(uuid.uuid4())}}


def test_one_flush_is_read_as_its_hand_offs_in_order_and_a_lone_one_as_itself() -> None:
    flushed = [announcement(), announcement()]
    assert announcements(handoffs_message(flushed)) == flushed
    lone = announcement()
    assert announcements(lone) == [lone]


@pytest.mark.parametrize("message", ["handing_off", 42, None, ["a"], {"handoffs": "abc"}, {"handoffs": {"a": 1}}])
def test_what_is_no_announcement_is_dropped(message: Any) -> None:
    assert announcements(message) == []


def test_entries_that_are_not_mappings_are_dropped_and_the_rest_kept() -> None:
    kept = announcement()
    assert announcements({"handoffs": ["x", None, 3, kept]}) == [kept]


@pytest.mark.parametrize("payload", [None, "handing_off", ["handing_off"], {"kind": "seal"}])
def test_a_payload_that_is_no_hand_off_claims_nothing(payload: Any) -> None:
    assert _claim({**announcement(), "payload": payload}, "web-2:2") is None


def test_a_process_does_not_claim_its_own_hand_off() -> None:
    assert _claim(announcement(origin="web-2:2"), "web-2:2") is None


# -- which listener claims a turn first ---------------------------------------------------------------------

def heard(listeners: Listeners, *speakers: str, at: float = 100.0) -> Listeners:
    for speaker in speakers:
        assert listeners.hear(presence(speaker), at)
    return listeners


def test_listeners_that_heard_each_other_agree_on_one_claimant_for_each_turn_and_share_the_turns() -> None:
    a, b = heard(Listeners("a:1"), "a:1", "b:2", "c:3"), heard(Listeners("b:2"), "a:1", "b:2", "c:3")
    turns = [uuid.uuid4() for _ in range(300)]
    claimants = [a.claimant(str(turn), "c:3", 101.0) for turn in turns]
    assert claimants == [b.claimant(str(turn), "c:3", 101.0) for turn in turns]
    # The announcer (a draining process) claims none of its own; the two others about half each.
    assert set(claimants) == {"a:1", "b:2"} and 100 <= claimants.count("a:1") <= 200
    delays = [(claim_delay(turn, "c:3", a, 101.0), claim_delay(turn, "c:3", b, 101.0)) for turn in turns]
    assert set(delays) == {(0.0, BACKUP_DELAY), (BACKUP_DELAY, 0.0)}  # one claims at once, the other backs it up


def test_a_listener_not_heard_lately_or_leaving_is_no_claimant_and_one_alone_claims_everything() -> None:
    listeners = heard(Listeners("a:1"), "b:2")
    heard(listeners, "c:3", at=100.0 + PRESENCE_TTL)
    later = 100.0 + PRESENCE_TTL + 1  # b was last heard over PRESENCE_TTL ago
    assert {listeners.claimant(str(uuid.uuid4()), "x:9", later) for _ in range(50)} == {"a:1", "c:3"}
    assert listeners.hear(presence("c:3", listening=False), later)
    assert {listeners.claimant(str(uuid.uuid4()), "x:9", later) for _ in range(50)} == {"a:1"}
    # Nobody heard (a layer that lost the presence messages): this one claims every turn at once.
    assert claim_delay(uuid.uuid4(), "x:9", Listeners("a:1"), later) == 0.0


@pytest.mark.parametrize("message", [announcement(), {"presence": "maybe"}, {"handoffs": []}, "listening", None])
def test_what_is_no_presence_message_is_left_to_the_announcements(message: Any) -> None:
    listeners = Listeners("a:1")
    assert not listeners.hear(message, 1.0)
    assert listeners.heard_at == {}


@pytest.mark.parametrize("speaker", [None, "", 42, ["b"], "x" * 201])
def test_a_presence_message_without_a_readable_origin_is_taken_and_ignored(speaker: Any) -> None:
    listeners = Listeners("a:1")
    assert listeners.hear({"type": "update", "origin": speaker, "presence": "listening"}, 1.0)
    assert listeners.heard_at == {}
    assert announcements(presence("b:2")) == [presence("b:2")]  # and an old listener claims nothing of one
    assert _claim(presence("b:2"), "a:1") is None


def test_the_listeners_that_drive_turns_are_the_claimants_and_the_others_back_them_up() -> None:
    """With ``TURN_RUNNER = "tasks"`` a web replica's claim would go through the queue: the workers claim first."""
    web = Listeners("web:1", drives=False)
    assert web.hear(presence("worker-a:2"), 100.0) and web.hear(presence("worker-b:3"), 100.0)
    assert web.hear(presence("web:4", drives=False), 100.0)
    turns = [uuid.uuid4() for _ in range(100)]
    claimants = {web.claimant(str(turn), "worker-c:5", 101.0) for turn in turns}
    assert claimants == {"worker-a:2", "worker-b:3"}
    assert {claim_delay(turn, "worker-c:5", web, 101.0) for turn in turns} == {BACKUP_DELAY}
    # The last worker drains (it is the announcer) and none other was heard: the web replicas claim, through the queue.
    alone = Listeners("web:1", drives=False)
    assert alone.hear(presence("web:4", drives=False), 100.0)
    assert {alone.claimant(str(turn), "worker-a:2", 101.0) for turn in turns} == {"web:1", "web:4"}
    assert presence("x:1")["drives"] is True and presence("x:1", drives=False)["drives"] is False


def test_listeners_not_heard_within_the_ttl_are_forgotten_not_kept_for_ever() -> None:
    """Every restart brings a new origin: the old ones go once PRESENCE_TTL has passed, at the next message."""
    listeners = heard(Listeners("a:1"), *[f"old-{number}:{number}" for number in range(50)])
    assert len(listeners.heard_at) == 50
    assert listeners.hear(presence("b:2"), 100.0 + PRESENCE_TTL + 1)
    assert set(listeners.heard_at) == {"b:2"}
    listeners.forget("b:2")
    listeners.forget(None)
    assert listeners.heard_at == {}
