"""The API's views, one module per resource; the public view classes are importable from here.

A project subclasses one and routes the subclass itself, before including the app's URLconf
(docs/howto/customize-the-api.md)::

    from agent_persistence.api.views import ConversationDetailView

The names are resolved on first access (PEP 562), so importing this package loads no view module.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

#: Public view class -> the module of this package that defines it (route name in the comment).
VIEWS = {
    "ConversationListView": "conversations",  # conversation-list
    "ConversationDetailView": "conversations",  # conversation-detail
    "ConversationShareView": "conversations",  # conversation-share
    "MessageDetailView": "conversations",  # message-detail
    "EventListView": "conversations",  # event-list
    "MessageThreadView": "transcripts",  # message-list
    "StartTurnView": "turns",  # turn-start
    "ResumeTurnView": "turns",  # turn-resume
    "CancelTurnView": "turns",  # turn-cancel
    "StreamStatusView": "turns",  # conversation-stream
    "ConversationRunsView": "turns",  # conversation-runs
    "InterruptsView": "turns",  # conversation-interrupts
    "RunDetailView": "turns",  # run-detail
    "RunChildrenView": "runs",  # run-children
    "RunInterruptsView": "runs",  # run-interrupts
    "CancelInterruptView": "runs",  # interrupt-cancel
    "ConversationFileListView": "files",  # file-list
    "FileDetailView": "files",  # file-detail
    "FileContentView": "files",  # file-content
    "TaskListView": "tasks",  # task-list
    "TaskDetailView": "tasks",  # task-detail
    "TaskCommentView": "tasks",  # task-comments
    "TaskResultView": "tasks",  # task-result
    "IntegrationListView": "oauth",  # mcp-integrations
    "AuthorizeView": "oauth",  # mcp-authorize
    "CallbackView": "oauth",  # mcp-callback
    "IntegrationView": "oauth",  # mcp-integration
    "ActivityListView": "activities",  # conversation-activities
    "ReconstructView": "activities",  # conversation-reconstruct
    "ConversationArtifactListView": "artifacts",  # conversation-artifacts
    "RunArtifactListView": "artifacts",  # run-artifacts
    "ArtifactDetailView": "artifacts",  # artifact-detail
    "ArtifactContentView": "artifacts",  # artifact-content
    "GenerationRunListView": "artifacts",  # generation-run-list
    "GenerationRunLatestView": "artifacts",  # generation-run-latest
    "GenerationRunDetailView": "artifacts",  # generation-run-detail
    "WebsocketTicketView": "tickets",  # ws-ticket
    "ConversationWebsocketTicketView": "tickets",  # conversation-ws-ticket
    "AgUiStreamView": "agui",  # conversation-agui
    "AiSdkChatView": "aisdk",  # aisdk-chat
    "AiSdkChatStreamView": "aisdk",  # aisdk-chat-stream
    "ScopedAPIView": "base",  # the base of them all
}

__all__ = sorted(VIEWS)


def __getattr__(name: str) -> Any:
    module = VIEWS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *VIEWS})
