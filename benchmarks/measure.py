"""Timing helpers: latency samples, percentiles, rates and medians of repeated rounds."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")


def percentile(samples: list[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` 0.5 is the median, 0.99 the p99)."""
    if not samples:
        raise ValueError("No samples.")
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Round:
    """One timed round: how many operations, how long the round took, each operation's latency."""

    operations: int
    seconds: float
    latencies: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.operations / self.seconds


@dataclass
class Rounds:
    """Repeated rounds of one measurement: the median rate, percentiles over all latencies."""

    rounds: list[Round] = field(default_factory=list)

    def add(self, round_: Round) -> None:
        self.rounds.append(round_)

    @property
    def median_rate(self) -> float:
        return statistics.median(round_.rate for round_ in self.rounds)

    def latency(self, fraction: float) -> float:
        return percentile([sample for round_ in self.rounds for sample in round_.latencies], fraction)


def time_each(operation: Callable[[T], object], arguments: Iterable[T]) -> Round:
    """Call ``operation`` once per argument, one after another, timing each call and the whole round."""
    latencies: list[float] = []
    started = time.perf_counter()
    for argument in arguments:
        call_started = time.perf_counter()
        operation(argument)
        latencies.append(time.perf_counter() - call_started)
    return Round(operations=len(latencies), seconds=time.perf_counter() - started, latencies=latencies)
