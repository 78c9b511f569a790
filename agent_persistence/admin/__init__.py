"""The Django admin of the app: every model browsable, runtime rows read-only, operator actions.

One module per group of models; importing this package registers them all
(``admin.autodiscover()`` imports it); a model without an admin of its
own gets a read-only one, so every model is browsable. The app index shows the operators'
dashboard (:mod:`.dashboard`), computed when the page is read.
"""

from __future__ import annotations

from django.apps import apps
from django.contrib import admin

from . import artifacts, conversations, files, oauth, runtime, tasks
from .base import ReadOnlyAdmin
from .conversations import ConversationAdmin, MessageAdmin
from .oauth import McpClientInfoAdmin, McpIntegrationAdmin
from .runtime import (
    AgentCheckpointAdmin,
    EventAdmin,
    InterruptAdmin,
    LeaseAdmin,
    RunAdmin,
    StreamRecordingAdmin,
    TurnSupervisionAdmin,
)

__all__ = [
    "AgentCheckpointAdmin",
    "ConversationAdmin",
    "EventAdmin",
    "InterruptAdmin",
    "LeaseAdmin",
    "McpClientInfoAdmin",
    "McpIntegrationAdmin",
    "MessageAdmin",
    "RunAdmin",
    "StreamRecordingAdmin",
    "TurnSupervisionAdmin",
    "artifacts",
    "conversations",
    "files",
    "oauth",
    "runtime",
    "tasks",
]

from . import activities  # noqa: E402, F401  (registers ActivityAdmin and MetadataEntryAdmin)

for _model in apps.get_app_config("agent_persistence").get_models():
    if not admin.site.is_registered(_model):
        admin.site.register(_model, ReadOnlyAdmin)
