import asyncio

from agent_persistence.runtime.agents import Agent
from agent_persistence.runtime.turn import Turn

FORECASTS = {"Oslo": "light snow, -3 °C", "Lisbon": "sunny, 19 °C"}


def get_weather(city: str) -> dict:
    # The tool. A real one would call a weather service.
    return {"city": city, "forecast": FORECASTS.get(city, "no forecast")}


async def say(turn: Turn, part: str, text: str) -> None:
    # Stream word by word, as a model's tokens arrive. The words already streamed are counted
    # in turn.state, so a run re-driven after a crash goes on where the checkpoint left off.
    words = text.split(" ")
    for position in range(turn.state.get(part, 0), len(words)):
        await asyncio.sleep(0.05)  # your model call
        turn.stream((" " if turn.text else "") + words[position])
        turn.state[part] = position + 1


class HelperAgent(Agent):
    async def run(self, turn: Turn) -> None:
        city = "Oslo" if "oslo" in str(turn.user_message.content).lower() else "Lisbon"
        await say(turn, "intro", f"Let me look up the weather in {city}.")
        weather = await turn.tool("weather-1", "get_weather", {"city": city}, get_weather, approval=True)
        if weather.get("denied"):
            await say(turn, "outro", "You did not let me look it up.")
        else:
            await say(turn, "outro", f"In {weather['city']} it is {weather['forecast']}.")
