"""Printing results: the machine the figures came from, and a table of store vs raw figures."""

from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import dataclass
from datetime import datetime, timezone

import django
import psycopg

SERVER_SETTINGS = ("server_version", "shared_buffers", "synchronous_commit", "fsync", "max_connections")
#: Calls of each probe of the commit-cost line.
COMMIT_PROBES = 200


@dataclass(frozen=True)
class Row:
    """One figure: the store's value beside the raw SQL value; ``ratio`` is store / raw."""

    figure: str
    unit: str
    store: float
    raw: float

    @property
    def ratio(self) -> float:
        return self.store / self.raw


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def commit_cost(connection: psycopg.Connection) -> str:
    """The machine's floor for one write: a round trip, and a commit that must reach the disk.

    On a connection of its own in autocommit: ``SELECT 1`` is one round trip with no commit
    work; ``SELECT pg_current_xact_id()`` takes a transaction id, so its commit writes and
    flushes a WAL record as any write's does, with nothing else to do. Figures from two
    machines compare only through these: a one-statement append costs about one of the second.
    """
    samples: dict[str, list[float]] = {}
    with psycopg.connect(connection.info.dsn, autocommit=True) as probe:
        for name, sql in (("round trip", "SELECT 1"), ("commit", "SELECT pg_current_xact_id()")):
            for _ in range(20):
                probe.execute(sql).fetchone()
            timings = []
            for _ in range(COMMIT_PROBES):
                started = time.perf_counter()
                probe.execute(sql).fetchone()
                timings.append(time.perf_counter() - started)
            samples[name] = timings
    trip, commit = (statistics.median(samples[name]) * 1000 for name in ("round trip", "commit"))
    return (
        f"round trip (SELECT 1) p50 {trip:.3f} ms; no-op commit with its WAL flush "
        f"(SELECT pg_current_xact_id(), autocommit) p50 {commit:.3f} ms; medians of {COMMIT_PROBES}"
    )


def machine_facts(connection: psycopg.Connection) -> list[tuple[str, str]]:
    """Cores, load, versions, the PostgreSQL settings that move write figures most, and the cost of a commit."""
    server = {name: connection.execute(f"SHOW {name}").fetchone()[0] for name in SERVER_SETTINGS}
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return [
        ("date", datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
        ("cpu", f"{os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable), {cpu_model()}"),
        ("load average", f"{load} (1, 5, 15 min, at start)"),
        ("postgresql", f"{server['server_version']} on {connection.info.host}:{connection.info.port}"),
        (
            "postgresql settings",
            f"shared_buffers={server['shared_buffers']} synchronous_commit={server['synchronous_commit']} "
            f"fsync={server['fsync']} max_connections={server['max_connections']}",
        ),
        ("commit cost", commit_cost(connection)),
        ("python", f"{platform.python_version()}, Django {django.get_version()}, psycopg {psycopg.__version__}"),
    ]


def format_value(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def format_facts(facts: list[tuple[str, str]]) -> str:
    width = max(len(name) for name, _ in facts)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in facts)


def format_table(rows: list[Row]) -> str:
    """A fixed-width text table (also valid Markdown) of figure, unit, store, raw and ratio."""
    header = ("figure", "unit", "store", "raw", "store/raw")
    cells = [header] + [
        (row.figure, row.unit, format_value(row.store), format_value(row.raw), f"{row.ratio:.2f}") for row in rows
    ]
    widths = [max(len(line[column]) for line in cells) for column in range(len(header))]

    def line(values: tuple[str, ...]) -> str:
        padded = [
            value.ljust(width) if column < 2 else value.rjust(width)
            for column, (value, width) in enumerate(zip(values, widths))
        ]
        return "| " + " | ".join(padded) + " |"

    # Markdown alignment: text columns left, number columns right.
    rules = ["-" * (width + 1) + (":" if column >= 2 else "-") for column, width in enumerate(widths)]
    separator = "|" + "|".join(rules) + "|"
    return "\n".join([line(cells[0]), separator] + [line(values) for values in cells[1:]])
