"""The demo page: one conversation, streamed over the websocket, in as many tabs as you like.

The page runs on the TypeScript client (``@agent-persistence/client``), served as the package's
static asset ``agent_persistence/client/index.js``: no bundler, no build step to run the demo.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render

from agent_persistence.exceptions import NotFound
from agent_persistence.runtime.agents import agent_names
from agent_persistence.scope import default_scope_resolver
from agent_persistence.stores import conversation_store


@login_required
def index(request: Any) -> HttpResponse:
    """``/?c=<conversation id>``: the conversation's page; without ``c`` a new conversation."""
    scope = default_scope_resolver(request)
    conversation_id = request.GET.get("c")
    if not conversation_id:
        conversation = conversation_store().create(scope, id=uuid.uuid4(), agent="demo", title="Demo evening")
        return redirect(f"/?c={conversation.pk}")
    try:
        conversation = conversation_store().get(scope, conversation_id)
    except NotFound:
        return redirect("/")
    messages = conversation_store().list_messages(scope, conversation.pk, limit=100).items
    # The page renders the transcript from these (the same fields as GET .../messages/, which it reads
    # again as turns start and end); every registered agent can answer: the demo and one per framework bridge.
    transcript = [
        {"id": str(message.pk), "role": message.role, "content": message.content, "tool_calls": message.tool_calls}
        for message in messages
    ]
    context = {"conversation": conversation, "transcript": transcript, "agents": agent_names()}
    return render(request, "demo/index.html", context)
