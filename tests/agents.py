"""Scripted agents for the runtime tests: deterministic answers, a counted tool, an approval.

The tool appends a line to the file named by ``AP_TOOL_LOG`` when it starts and
when it completes, so a test across processes can count how often it ran.
"""

from __future__ import annotations

import asyncio
import os

from agent_persistence.runtime.agents import Agent
from agent_persistence.runtime.turn import Turn

CHUNKS = [f"word{i:02d} " for i in range(60)]
ANSWER = "".join(CHUNKS)
TOOL_AT = 20


def chunk_delay() -> float:
    return float(os.environ.get("AP_CHUNK_DELAY", "0.01"))


async def lookup(query: str) -> dict:
    log = os.environ.get("AP_TOOL_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(f"start {query}\n")
    await asyncio.sleep(float(os.environ.get("AP_TOOL_SECONDS", "0.05")))
    if log:
        with open(log, "a") as handle:
            handle.write(f"done {query}\n")
    return {"answer": f"result of {query}"}


class ScriptedAgent(Agent):
    """Streams ANSWER chunk by chunk, calling the lookup tool once before chunk TOOL_AT."""

    approval = False

    async def run(self, turn: Turn) -> None:
        for index in range(turn.state.get("next", 0), len(CHUNKS)):
            if index == TOOL_AT:
                await turn.tool("call-1", "lookup", {"query": "q1"}, lookup, approval=self.approval)
            turn.stream(CHUNKS[index])
            turn.state["next"] = index + 1
            await asyncio.sleep(chunk_delay())


class ApprovalAgent(ScriptedAgent):
    """Like ScriptedAgent, but the tool needs a person's approval."""

    approval = True


class FailingAgent(Agent):
    async def run(self, turn: Turn) -> None:
        turn.stream("partial ")
        await asyncio.sleep(0)
        raise RuntimeError("the model is down")


class EchoAgent(Agent):
    """Answers with the transcript it was given, to check what agents see."""

    async def run(self, turn: Turn) -> None:
        turn.stream(" | ".join(f"{m.role}:{m.content}" for m in turn.transcript))
