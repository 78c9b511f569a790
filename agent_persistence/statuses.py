"""The status vocabularies, one enum each, shared by models, stores and the runtime.

They live apart from the models so code that must not touch the ORM (the
runtime, non-ORM store backends) can name a status without importing a model.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class LastTurnStatus(models.TextChoices):
    """How the conversation's latest turn ended (or that it runs)."""

    RUNNING = "running", _("running")
    COMPLETE = "complete", _("complete")
    ERRORED = "errored", _("errored")
    CANCELLED = "cancelled", _("cancelled")


class Role(models.TextChoices):
    SYSTEM = "system", _("system")
    USER = "user", _("user")
    ASSISTANT = "assistant", _("assistant")
    TOOL = "tool", _("tool")


class RunStatus(models.TextChoices):
    RUNNING = "running", _("running")
    INTERRUPTED = "interrupted", _("interrupted")
    COMPLETED = "completed", _("completed")
    FAILED = "failed", _("failed")
    ABORTED = "aborted", _("aborted")


#: A run in one of these never moves again.
FINISHED_RUN_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.ABORTED)
#: A run in one of these belongs to a turn that has not ended.
OPEN_RUN_STATUSES = (RunStatus.RUNNING, RunStatus.INTERRUPTED)


class InterruptKind(models.TextChoices):
    TOOL_APPROVAL = "tool_approval", _("tool approval")
    CLIENT_TOOL = "client_tool", _("client tool")
    GENERIC = "generic", _("generic")


class InterruptStatus(models.TextChoices):
    PENDING = "pending", _("pending")
    RESOLVED = "resolved", _("resolved")
    CANCELLED = "cancelled", _("cancelled")


class TaskStatus(models.TextChoices):
    PENDING = "pending", _("pending")
    RUNNING = "running", _("running")
    COMPLETED = "completed", _("completed")
    FAILED = "failed", _("failed")
    CANCELLED = "cancelled", _("cancelled")


class TurnState(models.TextChoices):
    """How a reader sees a conversation's turn, judged at read time (never stored as such)."""

    IDLE = "idle", _("idle")
    ALIVE = "alive", _("alive")
    DEAD = "dead", _("dead")
    DONE = "done", _("done")
    ERRORED = "errored", _("errored")
    #: Done, with questions waiting for an answer.
    INTERRUPTED = "interrupted", _("interrupted")
    #: Its producer's process shut down and released it (stored ``handed_off``): any replica may claim it now.
    HANDING_OFF = "handing_off", _("handing off")
    #: ``TURN_RUNNER = "tasks"``: claimed and enqueued, no worker has taken it yet (stored ``running`` with the
    #: replica :data:`QUEUED_REPLICA`, until the worker's first heartbeat names its own).
    QUEUED = "queued", _("queued")


#: The replica of a supervision row whose turn waits for a worker (``TURN_RUNNER = "tasks"``); a replica id is
#: ``host:pid`` or ``REPLICA_ID``, never this.
QUEUED_REPLICA = "queued"


class SupervisionStatus(models.TextChoices):
    """What a supervision row stores; "dead" is judged at read time, never stored."""

    RUNNING = "running", _("running")
    DONE = "done", _("done")
    ERRORED = "errored", _("errored")
    #: Released by its producer at a shutdown (epoch + 1, no producer holds it): claimable at once, not finished.
    HANDED_OFF = "handed_off", _("handed off")


class GenerationKind(models.TextChoices):
    """What a generation run makes (a chat is a Run, not one of these)."""

    IMAGE = "image", _("image")
    AUDIO = "audio", _("audio")
    SPEECH = "speech", _("speech")
    VIDEO = "video", _("video")
    TRANSCRIPTION = "transcription", _("transcription")


class GenerationStatus(models.TextChoices):
    RUNNING = "running", _("running")
    COMPLETED = "completed", _("completed")
    FAILED = "failed", _("failed")
    ABORTED = "aborted", _("aborted")


#: A generation run in one of these has a ``finished_at``.
FINISHED_GENERATION_STATUSES = (GenerationStatus.COMPLETED, GenerationStatus.FAILED, GenerationStatus.ABORTED)
