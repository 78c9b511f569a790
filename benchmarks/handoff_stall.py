"""The stall of a hand-off on SIGTERM, over repeated runs of the two-server end-to-end test.

``python -m benchmarks.handoff_stall [--runs 10] [--layer redis|recording]`` runs
``tests/realtime/test_handoff.py::test_sigterm_hands_the_turn_...`` ``--runs`` times (two real
uvicorn servers each time, on the database of ``DATABASE_URL`` or SQLite, Redis at ``REDIS_URL``
for the ``redis`` layer), reads the stall each run prints (a follower's last delta before the
hand-off to its first delta after it) and prints the median, p99 and max. Not a timed test: the
test itself only bounds the stall by ``DEAD_AFTER``.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST = ("tests/realtime/test_handoff.py::"
        "test_sigterm_hands_the_turn_to_the_other_server_with_no_gap_no_duplicate_and_a_short_stall")
STALL = re.compile(r"hand-off stall \((\w+)\): (\d+) ms")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.handoff_stall", description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--layer", choices=["redis", "recording"], default="redis")
    options = parser.parse_args(argv)
    stalls: list[float] = []
    for run in range(options.runs):
        result = subprocess.run(
            [sys.executable, "-m", "pytest", f"{TEST}[{options.layer}]", "-q", "-s", "-p", "no:cacheprovider"],
            cwd=ROOT, capture_output=True, text=True,
        )
        found = STALL.findall(result.stdout)
        if result.returncode != 0 or not found:
            print(result.stdout[-3000:], result.stderr[-2000:], sep="\n")
            print(f"run {run + 1} failed")
            return 1
        stalls.append(float(found[-1][1]))
        print(f"run {run + 1}: {stalls[-1]:.0f} ms", flush=True)
    print(f"{options.layer}: {len(stalls)} hand-offs, stall median {statistics.median(stalls):.0f} ms, "
          f"p99 {percentile(stalls, 0.99):.0f} ms, max {max(stalls):.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
