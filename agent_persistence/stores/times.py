"""Times a caller gives for rows it imports: the rules live in :mod:`agent_persistence.stores.rules.times`."""

from __future__ import annotations

from .rules.times import (  # re-exported: these rules moved to agent_persistence/stores/rules/times.py
    check_not_before as check_not_before,
    clean_caller_time as clean_caller_time,
)


