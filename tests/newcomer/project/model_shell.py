import asyncio
import uuid

from django.contrib.auth import get_user_model

from agent_persistence.runtime.lifecycle import start_turn
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store

alice = get_user_model().objects.get(username="alice")
scope = Scope(tenant="", user=str(alice.pk))
conversation_id = uuid.uuid4()


async def main():
    for question in ("What is the capital of Norway?", "And its population?"):
        handle = await start_turn(scope, conversation_id, content=question, agent="writer")
        print(await handle.task)


asyncio.run(main())

for message in conversation_store().list_messages(scope, conversation_id).items:
    print(message.role, message.content)
