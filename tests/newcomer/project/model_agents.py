import json

from openai import AsyncOpenAI

from agent_persistence.runtime.agents import Agent
from agent_persistence.runtime.turn import Turn

MODEL = "gpt-4.1-mini"
INSTRUCTIONS = "You are a helpful assistant. Answer in one sentence."


def chat_messages(turn: Turn) -> list[dict]:
    # turn.transcript (oldest first, ending with this turn's user message) as Chat Completions messages.
    messages = [{"role": "system", "content": INSTRUCTIONS}]
    for message in turn.transcript:
        content = message.content if isinstance(message.content, str) or message.content is None else json.dumps(message.content)
        if message.role == "assistant" and message.tool_calls:
            # The stored answer holds its tool calls with their results: the model sees the calls, then their results.
            calls = [{"id": call["id"], "type": "function",
                      "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}} for call in message.tool_calls]
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
            for call in message.tool_calls:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(call.get("result"))})
        if message.role in ("system", "user", "assistant") and content:
            messages.append({"role": message.role, "content": content})
    return messages


class WriterAgent(Agent):
    async def run(self, turn: Turn) -> None:
        messages = chat_messages(turn)
        if turn.text:
            # Re-driven after a crash: turn.text holds what was streamed up to the last checkpoint.
            messages += [{"role": "assistant", "content": turn.text}, {"role": "user", "content": "Go on exactly where you stopped."}]
        # AsyncOpenAI reads OPENAI_API_KEY (and OPENAI_BASE_URL, for a compatible server) from the environment.
        async with AsyncOpenAI() as client:
            stream = await client.chat.completions.create(model=MODEL, messages=messages, stream=True)
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    turn.stream(chunk.choices[0].delta.content)
