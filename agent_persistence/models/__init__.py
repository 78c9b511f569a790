"""The data model, one module per aggregate, re-exported here."""

from .conversations import Conversation, LastTurnStatus, Message, Role
from .events import Event, Lease
from .files import StoredFile
from .langgraph import GraphBlob, GraphCheckpoint, GraphWrite
from .oauth import McpClientInfo, McpIntegration
from .runs import FINISHED_RUN_STATUSES, Interrupt, InterruptKind, InterruptStatus, Run, RunStatus
from .tasks import Task, TaskStatus
from .turns import AgentCheckpoint, StreamRecording, SupervisionStatus, TurnSupervision
from .tickets import WebsocketTicket

__all__ = [
    "AgentCheckpoint",
    "Conversation",
    "Event",
    "FINISHED_RUN_STATUSES",
    "GraphBlob",
    "GraphCheckpoint",
    "GraphWrite",
    "Interrupt",
    "InterruptKind",
    "InterruptStatus",
    "LastTurnStatus",
    "Lease",
    "McpClientInfo",
    "McpIntegration",
    "Message",
    "Role",
    "Run",
    "RunStatus",
    "StoredFile",
    "StreamRecording",
    "SupervisionStatus",
    "Task",
    "TaskStatus",
    "TurnSupervision",
    "WebsocketTicket",
]

from .activities import Activity  # noqa: E402
from .metadata import MetadataEntry  # noqa: E402

__all__ += ["Activity", "MetadataEntry"]
from .artifacts import Artifact, Blob, GenerationRun  # noqa: E402  (issue 11: blobs, artifacts, generation runs)

__all__ += ["Artifact", "Blob", "GenerationRun"]
