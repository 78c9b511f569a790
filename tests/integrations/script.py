"""The script every framework agent of the bridge tests follows (see scripted_*.py).

Every agent answers the same way: it streams ``PART1`` (20 chunks), calls the
``lookup`` tool once (``q1``), then streams ``PART2`` (40 chunks); the whole
answer is ``tests.agents.ANSWER``. The model's reply is derived from the
conversation it is shown (tool result present or not), so a process that
takes over a turn gets the same script. Each model call appends a line to the
file named by ``AP_MODEL_LOG`` and the tool logs to ``AP_TOOL_LOG`` (as in
``tests/agents.py``), so a test can count them across processes.
"""

from __future__ import annotations

import os
import re

from tests.agents import CHUNKS, TOOL_AT, chunk_delay, lookup

lookup_query = lookup
__all__ = ["PART1", "PART2", "TOOL_ARGUMENTS", "chunk_delay", "log_model_call", "lookup_query", "tokens"]

PART1 = "".join(CHUNKS[:TOOL_AT])
PART2 = "".join(CHUNKS[TOOL_AT:])
TOOL_ARGUMENTS = {"query": "q1"}


def log_model_call(line: str) -> None:
    path = os.environ.get("AP_MODEL_LOG")
    if path:
        with open(path, "a") as handle:
            handle.write(line + "\n")


def tokens(text: str) -> list[str]:
    return [token for token in re.split(r"(\s)", text) if token]
