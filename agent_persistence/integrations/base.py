"""What the framework bridges share: exactly-once text across re-driven runs, replayed model calls, usage.

A bridge re-drives a framework's agent from the start of its turn after a crash
or an answered interrupt. Three things keep that re-drive from repeating work:

- :class:`DurableText` streams text under a stable key (a model step, a graph
  task) and remembers in ``turn.state`` how many characters each key has
  streamed, in the same synchronous step as ``turn.stream``, so a checkpoint
  holds both or neither; a re-driven run skips what is already in the answer.
- :class:`ModelCallLog` records each completed model response in
  ``turn.state``; a re-driven run replays the recorded ones instead of asking
  the model again, so the model sees (and names) the same tool calls and
  ``turn.tool`` returns their recorded results.
- :func:`add_usage` adds a real model call's token counts to the run.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..runtime.turn import Turn

logger = logging.getLogger(__name__)


def turn_epoch(turn: Turn) -> int:
    """The lease epoch of the run driving ``turn`` (every write of the run is fenced by it)."""
    return int(turn.epoch)


def bridge_state(turn: Turn, name: str) -> dict[str, Any]:
    """The bridge's own corner of ``turn.state`` (checkpointed with the rest)."""
    state = turn.state.setdefault(name, {})
    if not isinstance(state, dict):
        raise TypeError(f"turn.state[{name!r}] is reserved for the {name} bridge.")
    return state


class DurableText:
    """Stream text into ``turn`` under stable keys, each character once across every run of the turn."""

    def __init__(self, turn: Turn, state: dict[str, Any]) -> None:
        self.turn = turn
        self.streamed: dict[str, int] = state.setdefault("streamed", {})
        self._seen: dict[str, int] = {}

    def feed(self, key: str, text: str) -> None:
        """Take the next ``text`` produced under ``key`` in this run; stream what the turn lacks."""
        if not text:
            return
        seen = self._seen.get(key, 0)
        self._seen[key] = total = seen + len(text)
        done = self.streamed.get(key, 0)
        if total <= done:
            return  # streamed by an earlier run of the turn
        # No await between these two lines: a checkpoint has both or neither.
        self.turn.stream(text[max(0, done - seen):])
        self.streamed[key] = total

    def seen(self, key: str) -> int:
        return self._seen.get(key, 0)


class ModelCallLog:
    """Completed model responses of a turn, in call order, kept in ``turn.state``.

    ``next_recorded()`` returns the recorded response of the next call (or
    None when this call is new); ``record(response)`` appends a new one. The
    response is whatever JSON the bridge makes of it.
    """

    def __init__(self, state: dict[str, Any]) -> None:
        self.responses: list[Any] = state.setdefault("responses", [])
        self.calls = 0

    def step(self) -> int:
        """The index of the model call being made now (0, 1, 2 ... within the turn)."""
        return self.calls

    def next_recorded(self) -> Any | None:
        index = self.calls
        return self.responses[index] if index < len(self.responses) else None

    def advance(self) -> None:
        self.calls += 1

    def record(self, response: Any) -> None:
        if self.calls == len(self.responses):
            self.responses.append(response)
        self.calls += 1


def clean_usage(usage: dict[str, Any]) -> dict[str, int | float]:
    """The numeric, non-negative counters of a framework's usage object, flattened."""
    counters: dict[str, int | float] = {}
    for name, value in usage.items():
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, (int, float)) and value > 0:
            counters[name] = value
        elif isinstance(value, dict):
            for inner, inner_value in clean_usage(value).items():
                counters[f"{name}.{inner}"] = inner_value
    return counters


async def add_usage(turn: Turn, usage: dict[str, Any]) -> None:
    """Add a model call's token counts to the run's usage (fenced by the run's epoch)."""
    counters = clean_usage(usage)
    if counters:
        await turn.add_usage(counters)
