"""Times a caller gives for rows it imports (a message's ``created_at``, a run's ``started_at`` ...).

A store normally stamps its rows with the server's clock. A caller that
migrates history from another system may give the original times instead;
:func:`clean_caller_time` is the one check every store applies to them, before
any transaction opens:

- ``None`` means "not given" (the store stamps the row itself);
- an aware :class:`~datetime.datetime`, or ISO 8601 text with a zone
  (``2024-01-02T12:00:00Z``, ``...+02:00``), is accepted and returned in UTC;
- anything else is refused with :class:`~agent_persistence.exceptions.Validation`
  and a stable code: ``invalid_time`` (not a date and time, or out of range),
  ``naive_time`` (no zone), ``future_time`` (later than now plus
  ``IMPORT_CLOCK_SKEW`` seconds, which absorbs the drift between the clocks of
  the exporting machine and this one).

:func:`check_not_before` refuses a pair in the wrong order (a run finished
before it started) with ``time_out_of_order``.

Times in the past are accepted however old: imported history is old.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

from django.utils import timezone

from ...conf import app_settings
from ...exceptions import Validation


def clean_caller_time(value: Any, *, field: str) -> datetime | None:
    """``value`` as an aware UTC datetime, or None when not given; Validation when it cannot be stored."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise Validation(f"{field} must be an ISO 8601 date and time.", code="invalid_time", field=field) from None
    if not isinstance(value, datetime):
        raise Validation(f"{field} must be a date and time.", code="invalid_time", field=field)
    if value.utcoffset() is None:
        raise Validation(f"{field} must carry a time zone (Z or +hh:mm).", code="naive_time", field=field)
    try:
        value = value.astimezone(dt_timezone.utc)
    except OverflowError:  # 0001-01-01T00:00+01:00 has no UTC equivalent
        raise Validation(f"{field} is out of range.", code="invalid_time", field=field) from None
    skew = app_settings.IMPORT_CLOCK_SKEW
    if value > timezone.now() + timedelta(seconds=skew):
        raise Validation(
            f"{field} is in the future (more than IMPORT_CLOCK_SKEW = {skew} seconds ahead of this server).",
            code="future_time",
            field=field,
            limit=skew,
        )
    return value


def check_not_before(later: datetime, earlier: datetime, *, field: str, after: str) -> None:
    """Validation ``time_out_of_order`` unless ``later`` (the value of ``field``) is ``earlier`` (``after``'s) or later."""
    if later < earlier:
        raise Validation(f"{field} is before {after}.", code="time_out_of_order", field=field)
