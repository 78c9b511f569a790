"""The operator actions: cancel a turn, force release a conversation, mark a stuck run aborted.

Each calls the runtime or a store (the only writes the admin makes to runtime
rows), reports per row what happened, and records an entry in the object's
admin history. The admins guard them with ``allowed_permissions=("operate",)``:
the model's change permission.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.contrib import admin, messages
from django.core.exceptions import ObjectDoesNotExist
from django.http import HttpRequest

from ..exceptions import AgentPersistenceError
from ..models import Conversation, Run
from ..runtime.lifecycle import force_release, stop_turn_now
from ..stores import run_store

#: The error a run marked aborted from the admin carries (the owner sees it through the API).
OPERATOR_ABORT_ERROR = {"code": "run_stuck", "message": "An operator marked this run aborted."}


def cancel_turns(modeladmin: admin.ModelAdmin, request: HttpRequest, conversation_ids: Iterable[uuid.UUID]) -> None:
    """What the owner's stop does, for each conversation: a live producer stops, a dead one's turn is closed out."""
    for conversation in Conversation.objects.filter(pk__in=list(conversation_ids)):
        try:
            stop_turn_now(conversation.pk)
        except (AgentPersistenceError, ObjectDoesNotExist) as error:
            reason = getattr(error, "message", None) or "it no longer exists"
            modeladmin.message_user(request, f"{conversation}: not cancelled ({reason}).", messages.WARNING)
        else:
            modeladmin.log_change(request, conversation, "Cancelled the running turn.")
            modeladmin.message_user(request, f"{conversation}: stop requested.", messages.SUCCESS)


def force_release_turns(modeladmin: admin.ModelAdmin, request: HttpRequest, conversation_ids: Iterable[uuid.UUID]) -> None:
    """Fence each conversation's producer and end its turn as errored."""
    released = idle = 0
    for conversation in Conversation.objects.filter(pk__in=list(conversation_ids)):
        if force_release(conversation.pk):
            released += 1
            modeladmin.log_change(request, conversation, "Force released the running turn.")
        else:
            idle += 1
    modeladmin.message_user(request, f"Released {released} conversation(s).", messages.SUCCESS)
    if idle:
        modeladmin.message_user(request, f"{idle} conversation(s) had no running turn.", messages.WARNING)


def abort_stuck_runs(modeladmin: admin.ModelAdmin, request: HttpRequest, runs: Iterable[Run]) -> None:
    """End each open run as aborted (``run_stuck``); finished runs stay as they are."""
    aborted = finished = 0
    for run in runs:
        if run_store().abort_stuck(run.pk, error=dict(OPERATOR_ABORT_ERROR)):
            aborted += 1
            modeladmin.log_change(request, run, "Marked the run aborted.")
        else:
            finished += 1
    modeladmin.message_user(request, f"Aborted {aborted} run(s).", messages.SUCCESS)
    if finished:
        modeladmin.message_user(request, f"{finished} run(s) had already finished.", messages.WARNING)

