"""Follow a turn from a script: python follow.py WEBSOCKET-URL-WITH-TICKET"""
import asyncio
import json
import sys

import websockets


async def follow(url: str) -> None:
    # The Origin must name a host of ALLOWED_HOSTS (AllowedHostsOriginValidator), as a browser's would.
    async with websockets.connect(url, origin="http://127.0.0.1:8000") as socket:
        await socket.send(json.dumps({"type": "attach"}))
        async for message in socket:
            frame = json.loads(message)
            if frame["type"] == "final":
                print(frame["stop_reason"], frame["message"]["content"])
                return


asyncio.run(follow(sys.argv[1]))
