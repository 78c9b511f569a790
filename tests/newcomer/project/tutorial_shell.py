import asyncio
import uuid

from django.contrib.auth import get_user_model

from agent_persistence.runtime.lifecycle import continue_turn, start_turn
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store, interrupt_store

alice = get_user_model().objects.get(username="alice")
scope = Scope(tenant="", user=str(alice.pk))
conversation_id = uuid.uuid4()


async def main():
    # No blank line inside: the interactive shell would end the function there.
    handle = await start_turn(scope, conversation_id, content="What is the weather in Lisbon?", agent="helper")
    print(await handle.task)
    # The run stopped at the approval: the question it asks.
    pending = await interrupt_store().apending(scope, conversation_id)
    print(pending[0].kind, pending[0].payload)
    # Approve it: a continuation run of the same turn calls the tool.
    resolved, handle = await continue_turn(
        scope, conversation_id, [{"id": str(pending[0].pk), "response": {"approved": True}}]
    )
    print(await handle.task)


asyncio.run(main())

page = conversation_store().list_messages(scope, conversation_id)
for message in page.items:
    print(message.role, message.content)

print(page.items[-1].tool_calls)
