"""The demo's agent: a scripted streaming answer with a tool that asks for approval. No network."""

from __future__ import annotations

import asyncio

from agent_persistence.runtime.agents import Agent
from agent_persistence.runtime.turn import Turn

INTRO = (
    "Let me plan your evening. I will look for a quiet restaurant near the river, "
    "check the opening hours, and then book a table for two at half past seven. "
)
OUTRO = (
    "Everything is set: enjoy your dinner. You can reload this page, open it in a second tab, "
    "or stop the server mid-answer and start it again: the answer carries on where it was."
)
WORD_DELAY = 0.08


def words(text: str) -> list[str]:
    return [word + " " for word in text.split()]


async def book_table(restaurant: str, time: str, people: int) -> dict:
    await asyncio.sleep(0.5)
    return {"booked": True, "restaurant": restaurant, "time": time, "people": people}


class DemoAgent(Agent):
    """Streams INTRO, asks to book a table (tool approval), then streams the outcome and OUTRO."""

    async def run(self, turn: Turn) -> None:
        await self.say(turn, "intro", INTRO)
        result = await turn.tool(
            "book-1", "book_table", {"restaurant": "Le Quai", "time": "19:30", "people": 2}, book_table, approval=True
        )
        if result.get("denied"):
            await self.say(turn, "denied", "No booking then: tell me when you want another time. ")
            return
        await self.say(turn, "outro", OUTRO)

    async def say(self, turn: Turn, part: str, text: str) -> None:
        """Stream ``text`` word by word; ``turn.state`` remembers how far, so a resume goes on from there."""
        chunks = words(text)
        for index in range(turn.state.get(part, 0), len(chunks)):
            turn.stream(chunks[index])
            turn.state[part] = index + 1
            await asyncio.sleep(WORD_DELAY)


LONG_ANSWER = " ".join(f"Sentence {i:03d} of a long, deterministic answer." for i in range(40)) + " The end."
LONG_CHUNK = 12
LONG_DELAY = 0.05


class LongAgent(Agent):
    """A long deterministic answer in small chunks: what ``manage.py crash_test --agent long`` kills."""

    async def run(self, turn: Turn) -> None:
        chunks = [LONG_ANSWER[i : i + LONG_CHUNK] for i in range(0, len(LONG_ANSWER), LONG_CHUNK)]
        for index in range(turn.state.get("next", 0), len(chunks)):
            turn.stream(chunks[index])
            turn.state["next"] = index + 1
            await asyncio.sleep(LONG_DELAY)
