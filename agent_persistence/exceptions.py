"""Domain exceptions. Each carries a stable ``code``; none knows of HTTP.

The API and the websocket protocol map them to statuses at their edge
(``agent_persistence.api.errors``): NotFound 404, ConversationNotOwned 403,
Conflict / Busy / PendingInterrupts 409, PreconditionFailed 412, Gone 410,
StorageLimit 413, Validation 400, TooManyRequests 429 and Unavailable /
ShuttingDown 503 (with ``Retry-After`` when it says how long to wait).
"""

from __future__ import annotations

from typing import Any


class AgentPersistenceError(Exception):
    """Base class of every domain error."""

    code = "error"
    default_message = "The operation failed."

    def __init__(self, message: str | None = None, *, code: str | None = None, **details: Any) -> None:
        self.message = message or self.default_message
        if code is not None:
            self.code = code
        self.details = details
        super().__init__(self.message)

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        return body


class NotFound(AgentPersistenceError):
    code = "not_found"
    default_message = "Not found."


class ConversationNotOwned(AgentPersistenceError):
    code = "conversation_not_owned"
    default_message = "Only the owner of this conversation may change it."


class Validation(AgentPersistenceError):
    code = "invalid"
    default_message = "The value is not valid."


class StorageLimit(AgentPersistenceError):
    code = "too_large"
    default_message = "The value is larger than the configured limit."


class Conflict(AgentPersistenceError):
    code = "conflict"
    default_message = "The operation conflicts with the current state."


class Busy(Conflict):
    """A live turn already holds the conversation."""

    code = "conversation_busy"
    default_message = "A turn is already running in this conversation."


class PendingInterrupts(Conflict):
    code = "interrupts_pending"
    default_message = "The conversation has pending interrupts; answer them first."


class Fenced(Conflict):
    """A producer's epoch is no longer the conversation's: it must stop writing."""

    code = "fenced"
    default_message = "A newer producer holds this conversation."


class PreconditionFailed(AgentPersistenceError):
    code = "version_mismatch"
    default_message = "The conversation changed since you read it."


class Gone(AgentPersistenceError):
    code = "gone"
    default_message = "This is no longer available."


class RangeNotSatisfiable(AgentPersistenceError):
    """No byte of the requested range exists (it starts at or past the end); ``details["size"]`` is the size."""

    code = "range_not_satisfiable"
    default_message = "The requested range is not within the content."


class TooManyRequests(AgentPersistenceError):
    """Over a per-user cap (tickets per minute, open streams); ``retry_after`` seconds, when known, until it frees."""

    code = "too_many_requests"
    default_message = "Too many requests; try again later."

    def __init__(self, message: str | None = None, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class Unavailable(AgentPersistenceError):
    """This process cannot take the request now; another replica (or a retry) can."""

    code = "unavailable"
    default_message = "This server cannot take the request now; try again."

    def __init__(self, message: str | None = None, *, retry_after: float | None = 1.0, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class ShuttingDown(Unavailable):
    """This process is draining (``SHUTDOWN_GRACE``): it starts, resumes and continues no turn; retry on another replica."""

    code = "shutting_down"
    default_message = "This server is shutting down and takes no new turn; retry on another server."
