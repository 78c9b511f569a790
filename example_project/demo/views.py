"""The demo page: one conversation, streamed over the websocket, in as many tabs as you like."""

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
    # Every registered agent can answer: the scripted demo and one per framework bridge.
    return render(request, "demo/index.html", {"conversation": conversation, "messages": messages, "agents": agent_names()})
