"""What the hand-off listener reads off the reapers' group: one flush's hand-offs, or one; garbage dropped."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agent_persistence.realtime.delivery import handoffs_message
from agent_persistence.realtime.handoffs import _claim, announcements


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
