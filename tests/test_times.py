"""``clean_caller_time``, the one check of every caller-supplied time, and its setting ``IMPORT_CLOCK_SKEW``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any
from unittest import mock

import pytest

from agent_persistence.checks import check_settings
from agent_persistence.exceptions import Validation
from agent_persistence.stores.times import clean_caller_time

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def frozen_now() -> Any:
    with mock.patch("django.utils.timezone.now", return_value=NOW):
        yield


def test_none_is_not_given() -> None:
    assert clean_caller_time(None, field="started_at") is None


@pytest.mark.parametrize(
    "value",
    [
        "2024-06-01T14:00:00+02:00",
        "2024-06-01T12:00:00Z",
        datetime(2024, 6, 1, 14, 0, tzinfo=timezone(timedelta(hours=2))),
        NOW + timedelta(seconds=300),
    ],
)
def test_an_aware_time_comes_back_in_utc(value: Any) -> None:
    cleaned = clean_caller_time(value, field="created_at")
    assert cleaned.tzinfo is timezone.utc and cleaned <= NOW + timedelta(seconds=300)


def test_any_past_is_accepted() -> None:
    assert clean_caller_time("0001-01-01T00:00:00Z", field="created_at") == datetime(1, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "value, code",
    [
        ("2024-06-01T12:00:00", "naive_time"),
        (datetime(2024, 6, 1, 12, 0), "naive_time"),
        ("", "invalid_time"),
        ("noon", "invalid_time"),
        (1717243200, "invalid_time"),
        (True, "invalid_time"),
        (NOW.date(), "invalid_time"),
        ("0001-01-01T00:00:00+01:00", "invalid_time"),
        (NOW + timedelta(seconds=301), "future_time"),
    ],
)
def test_what_cannot_be_stored_is_refused_with_a_stable_code(value: Any, code: str) -> None:
    with pytest.raises(Validation) as caught:
        clean_caller_time(value, field="resolved_at")
    assert caught.value.code == code
    assert caught.value.details["field"] == "resolved_at"


def test_the_skew_follows_the_setting(settings: Any) -> None:
    ahead = NOW + timedelta(seconds=60)
    assert clean_caller_time(ahead, field="created_at") == ahead
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "IMPORT_CLOCK_SKEW": 30}
    with pytest.raises(Validation) as caught:
        clean_caller_time(ahead, field="created_at")
    assert (caught.value.code, caught.value.details["limit"]) == ("future_time", 30)


@pytest.mark.parametrize("value", [0, -5, "300", None, True])
def test_a_skew_that_is_not_a_positive_number_is_e003(settings: Any, value: Any) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "IMPORT_CLOCK_SKEW": value}
    assert "agent_persistence.E003" in [error.id for error in check_settings()]
