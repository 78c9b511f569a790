"""The one-statement appends of PostgreSQL, now in :mod:`agent_persistence.stores.postgres.appends`.

Re-exported here for the code that imports them from this module (the benchmarks).
"""

from __future__ import annotations

from .postgres.appends import (  # re-exported: these moved to agent_persistence/stores/postgres/appends.py
    APPEND_EVENTS as APPEND_EVENTS,
    APPEND_MESSAGE as APPEND_MESSAGE,
    CONVERSATION as CONVERSATION,
    EVENT as EVENT,
    MESSAGE as MESSAGE,
    RUN as RUN,
    SUPERVISION as SUPERVISION,
    TurnRows as TurnRows,
    append_events as append_events,
    append_message as append_message,
    read_turn_rows as read_turn_rows,
    start_in_locked_conversation as start_in_locked_conversation,
    start_in_new_conversation as start_in_new_conversation,
)
