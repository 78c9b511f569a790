"""The `AGENT_PERSISTENCE` settings object.

Read settings as attributes of :data:`app_settings`::

    from agent_persistence.conf import app_settings
    app_settings.HEARTBEAT_INTERVAL

Defaults live in :data:`DEFAULTS`; every key is documented in
``docs/reference/settings.md``. Unknown keys are refused by the system check
``agent_persistence.E001`` (and by attribute access, which raises
``AttributeError``). Import strings are resolved lazily, on first use, and the
object reloads itself when a test changes the setting (``setting_changed``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

SETTING_NAME = "AGENT_PERSISTENCE"

MIB = 1024 * 1024

DEFAULTS: dict[str, Any] = {
    # The store family, by the import path of its module (agent_persistence.stores.family).
    "STORES": "agent_persistence.stores.orm.family",
    # Deprecated (STORES replaces them): one store each, by class import path; None: the family's.
    "CONVERSATION_STORE": None,
    "EVENT_STORE": None,
    "LEASE_STORE": None,
    "FILE_STORE": None,
    "TASK_STORE": None,
    "RUN_STORE": None,
    "INTERRUPT_STORE": None,
    "SUPERVISION_STORE": None,
    "RECORDING_STORE": None,
    "CHECKPOINT_STORE": None,
    "TURN_STORE": None,
    # Agents: {"name": "dotted.path.AgentClass"}.
    "AGENTS": {},
    # Maps a request (or websocket scope) to a Scope(tenant, user).
    "SCOPE_RESOLVER": "agent_persistence.scope.default_scope_resolver",
    # Turn supervision, in seconds.
    "HEARTBEAT_INTERVAL": 1.0,
    "DEAD_AFTER": 3.0,
    "RECORDING_FLUSH_INTERVAL": 0.5,
    "CHECKPOINT_INTERVAL": 5.0,
    "MAX_RUN_TIME": 3600.0,
    # Seconds a producer's write waits for a row lock before it fails and is retried (PostgreSQL).
    "PRODUCER_LOCK_TIMEOUT": 1.0,
    # Seconds a producer keeps retrying a seal the database refuses before it leaves the turn dead for the reaper.
    "SEAL_RETRY_FOR": 300.0,
    # Seconds a shutting-down process (SIGTERM, ASGI lifespan shutdown) lets its turns run on; those
    # still running then are handed off at their next step (agent_persistence.runtime.shutdown).
    "SHUTDOWN_GRACE": 10.0,
    "REAPER_ENABLED": False,
    # Where producers run: "inprocess" (the process that accepted the turn) or "tasks" (a worker of
    # Django's Tasks framework: db_worker, celery worker; agent_persistence.runtime.workers).
    "TURN_RUNNER": "inprocess",
    # Seconds a turn enqueued for a worker may wait before a reaper judges it dead (its task lost) and enqueues it again.
    "QUEUED_DEAD_AFTER": 60.0,
    "REAPER_INTERVAL": 5.0,
    # Seconds the fleet-wide sweep lease lasts (one sweep at a time across every process); a sweep
    # re-takes it between turns and releases it when done. None: 2 x REAPER_INTERVAL.
    "REAPER_LEASE_TTL": None,
    # Resumes of one turn that may fail (the producer died or raised before its seal) before the
    # reaper closes the turn out as errored with its partial answer instead of resuming it again.
    "MAX_RESUME_ATTEMPTS": 3,
    # Identifies this server process in supervision rows; None: "<hostname>:<pid>".
    "REPLICA_ID": None,
    # Websockets: open sockets per user in one server process (None: no cap; the excess is
    # closed with 4429), seconds between re-checks of every open socket's access, and the
    # longest wait between reads of an idle conversation that no spanning layer covers.
    "WEBSOCKET_MAX_PER_USER": 100,
    "WEBSOCKET_ACCESS_CHECK_INTERVAL": 2.0,
    "WEBSOCKET_IDLE_POLL_MAX": 5.0,
    # Server-sent event streams (AG-UI) open per user in one server process (None: no cap; the
    # excess is refused 429 too_many_streams before any query).
    "SSE_MAX_PER_USER": 100,
    # Limits, in bytes / rows.
    "MAX_FILE_BYTES": 25 * MIB,
    "MAX_STATE_BYTES": 4 * MIB,
    "MAX_MESSAGE_BYTES": 1 * MIB,
    "MAX_EVENT_BYTES": 64 * 1024,
    "DEFAULT_PAGE_SIZE": 100,
    "MAX_PAGE_SIZE": 1000,
    # Deepest nesting of arrays and objects accepted in JSON (bodies, frames, stored values).
    "JSON_MAX_DEPTH": 64,
    # Files: the storage alias (settings.STORAGES) and the folder inside it.
    "FILE_STORAGE": "default",
    "FILE_UPLOAD_TO": "agent_persistence/files/%Y/%m/%d/",
    # Secrets at rest: Fernet keys, newest first (the first encrypts, all decrypt).
    "ENCRYPTION_KEYS": [],
    # Retention, in seconds (None keeps forever).
    "EVENT_RETENTION": None,
    "RECORDING_RETENTION": 24 * 3600.0,
    "SWEEP_BATCH_SIZE": 500,
    # MCP OAuth: the repository (storage) behind the integration store.
    "OAUTH_REPOSITORY": "agent_persistence.oauth.repository.OAuthRepository",
    # MCP servers users may authorize: {"name": {"issuer" or "authorization_endpoint" +
    # "token_endpoint", "registration_endpoint"?, "client_id"?, "client_secret"?,
    # "token_endpoint_auth_method"?, "scopes"?, "resource"?}}.
    "MCP_SERVERS": {},
    # The OAuth redirect URI; None builds it from the request and the callback route.
    "OAUTH_REDIRECT_URI": None,
    # Seconds a started authorization waits for its callback.
    "OAUTH_PENDING_TTL": 600.0,
    # An access token this many seconds from expiry is refreshed before use.
    "OAUTH_REFRESH_MARGIN": 60.0,
    # Seconds an HTTP call to an authorization server may take.
    "OAUTH_HTTP_TIMEOUT": 10.0,
    # Seconds a caller-supplied time of an imported row (a message's created_at, a run's
    # started_at ...) may lie ahead of this server's clock (agent_persistence.stores.times).
    "IMPORT_CLOCK_SKEW": 300.0,
    # Websocket tickets (POST ws-ticket/): seconds a ticket may wait before a socket spends it.
    "WS_TICKET_TTL": 60.0,
    # Tickets one user may be issued per minute (None: no cap; the excess is 429 too_many_tickets).
    "WS_TICKETS_PER_MINUTE": 60,
    # Deprecated, as the other *_STORE keys: STORES chooses them.
    "BLOB_STORE": None,
    "ARTIFACT_STORE": None,
    "GENERATION_RUN_STORE": None,
    # Blobs: the storage alias (settings.STORAGES), the folder inside it, the largest blob in bytes.
    "BLOB_STORAGE": "default",
    "BLOB_UPLOAD_TO": "agent_persistence/blobs/%Y/%m/%d/",
    "MAX_BLOB_BYTES": 100 * MIB,
}

# Keys whose value is an import string, resolved on first access.
IMPORT_STRINGS = frozenset(
    {
        "CONVERSATION_STORE",
        "EVENT_STORE",
        "LEASE_STORE",
        "FILE_STORE",
        "TASK_STORE",
        "RUN_STORE",
        "INTERRUPT_STORE",
        "SUPERVISION_STORE",
        "RECORDING_STORE",
        "CHECKPOINT_STORE",
        "TURN_STORE",
        "SCOPE_RESOLVER",
        "OAUTH_REPOSITORY",
        "BLOB_STORE",
        "ARTIFACT_STORE",
        "GENERATION_RUN_STORE",
    }
)


class AppSettings:
    """Attribute access to ``settings.AGENT_PERSISTENCE`` merged over DEFAULTS."""

    def __init__(self, defaults: dict[str, Any] | None = None) -> None:
        self.defaults = defaults or DEFAULTS
        self._cached: set[str] = set()

    @property
    def user_settings(self) -> dict[str, Any]:
        if not hasattr(self, "_user_settings"):
            self._user_settings = getattr(settings, SETTING_NAME, {}) or {}
        return self._user_settings

    def unknown_keys(self) -> list[str]:
        return sorted(set(self.user_settings) - set(self.defaults))

    def __getattr__(self, name: str) -> Any:
        if name not in self.defaults:
            raise AttributeError(f"Invalid {SETTING_NAME} setting: {name!r}")
        value = self.user_settings.get(name, self.defaults[name])
        if name in IMPORT_STRINGS and isinstance(value, str):
            value = import_string(value)
        elif name in IMPORT_STRING_LISTS and value is not None:
            value = [import_string(item) if isinstance(item, str) else item for item in value]
        elif name in IMPORT_STRING_DICTS:
            value = {key: import_string(item) if isinstance(item, str) else item for key, item in value.items()}
        self._cached.add(name)
        setattr(self, name, value)
        return value

    def raw(self, name: str) -> Any:
        """The configured value without resolving import strings."""
        if name not in self.defaults:
            raise AttributeError(f"Invalid {SETTING_NAME} setting: {name!r}")
        return self.user_settings.get(name, self.defaults[name])

    def reload(self) -> None:
        for name in self._cached:
            delattr(self, name)
        self._cached.clear()
        if hasattr(self, "_user_settings"):
            delattr(self, "_user_settings")


app_settings = AppSettings(DEFAULTS)


def reload_app_settings(*, setting: str, **kwargs: Any) -> None:
    # The stores forget their instances on the same signal (agent_persistence.stores).
    if setting == SETTING_NAME:
        app_settings.reload()


setting_changed.connect(reload_app_settings)

# Deprecated, as the other *_STORE keys: STORES chooses them.
DEFAULTS["ACTIVITY_STORE"] = None
DEFAULTS["METADATA_STORE"] = None
IMPORT_STRINGS = IMPORT_STRINGS | {"ACTIVITY_STORE", "METADATA_STORE"}

# What deleting a Django user does to its rows (docs/howto/erase-and-export-users.md):
# "erase" (every row of the user, in every tenant, goes in the same transaction), "keep"
# (nothing), or "refuse" (the delete raises ProtectedError and is rolled back while rows remain).
DEFAULTS["ON_USER_DELETE"] = "erase"
ON_USER_DELETE_CHOICES = ("erase", "keep", "refuse")

# The DRF extension points of the API (docs/howto/customize-the-api.md). Each list holds import
# strings (or classes). PERMISSION_CLASSES are checked after HasScope, which every scoped view
# checks first whatever is configured; None for AUTHENTICATION_CLASSES / THROTTLE_CLASSES keeps
# the host's REST_FRAMEWORK defaults. SERIALIZERS maps a resource name (SERIALIZER_RESOURCES) to
# the serializer that renders it.
DEFAULTS["PERMISSION_CLASSES"] = []
DEFAULTS["AUTHENTICATION_CLASSES"] = None
DEFAULTS["THROTTLE_CLASSES"] = None
DEFAULTS["SERIALIZERS"] = {}
IMPORT_STRING_LISTS = frozenset({"PERMISSION_CLASSES", "AUTHENTICATION_CLASSES", "THROTTLE_CLASSES"})
IMPORT_STRING_DICTS = frozenset({"SERIALIZERS"})
#: The resources whose serializer SERIALIZERS may replace, and the built-in serializer of each.
SERIALIZER_RESOURCES = {
    "conversation": "agent_persistence.api.serializers.conversations.ConversationSerializer",
    "message": "agent_persistence.api.serializers.conversations.MessageSerializer",
}
