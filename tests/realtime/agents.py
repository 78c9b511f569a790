"""An agent for the websocket fault tests: a long, deterministic answer at a pace the client picks.

The user message is ``{"chunks": N, "every": seconds}``; the answer is
:func:`paced_answer` ``(N)``, streamed one chunk every ``every`` seconds, and
resumable from its checkpoint like the scripted agent of ``tests/agents.py``.
"""

from __future__ import annotations

import asyncio
import json

from agent_persistence.runtime.agents import Agent
from agent_persistence.runtime.turn import Turn


def paced_chunk(index: int) -> str:
    return f"c{index:04d} "


def paced_answer(chunks: int) -> str:
    return "".join(paced_chunk(index) for index in range(chunks))


class PacedAgent(Agent):
    async def run(self, turn: Turn) -> None:
        plan = json.loads(turn.user_message.content)
        for index in range(turn.state.get("next", 0), plan["chunks"]):
            turn.stream(paced_chunk(index))
            turn.state["next"] = index + 1
            await asyncio.sleep(plan["every"])
