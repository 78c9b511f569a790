"""Timestamps a caller supplies for an import: history migrated with the instants it happened at.

Stores stamp their rows with the clock, except where a caller migrates
history (``started_at`` / ``finished_at`` of a run, ``requested_at`` /
``resolved_at`` of an interrupt, ``created_at`` of a message). Such an instant
must carry a time zone and may not lie in the future by more than
``IMPORT_CLOCK_SKEW`` seconds, the drift allowed between the importer's clock
and the server's; anything else is Validation, so a bad import writes nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from ..conf import app_settings
from ..exceptions import Validation
from .base import clean_datetime


def clean_caller_time(value: Any, *, field: str) -> datetime | None:
    """``value`` as an aware datetime (from a datetime or ISO 8601 text), or None when it is None.

    Validation when it is neither, has no time zone, or is later than now
    plus ``IMPORT_CLOCK_SKEW`` seconds.
    """
    moment = clean_datetime(value, field)
    if moment is None:
        return None
    latest = timezone.now() + timedelta(seconds=app_settings.IMPORT_CLOCK_SKEW)
    if moment > latest:
        raise Validation(
            f"{field} lies in the future (more than IMPORT_CLOCK_SKEW seconds ahead of the server's clock).",
            code="time_in_future",
            field=field,
        )
    return moment


def check_not_before(later: datetime, earlier: datetime, *, field: str, after: str) -> None:
    """Validation unless ``later`` (the value of ``field``) is ``earlier`` (``after``'s) or later."""
    if later < earlier:
        raise Validation(f"{field} is before {after}.", code="time_out_of_order", field=field)
