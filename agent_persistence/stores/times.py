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

from .rules.times import (  # re-exported: these rules moved to agent_persistence/stores/rules/times.py
    check_not_before as check_not_before,
    clean_caller_time as clean_caller_time,
)


