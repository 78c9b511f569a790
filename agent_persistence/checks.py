"""System checks with stable ids for bad configuration.

- E001: unknown key in AGENT_PERSISTENCE.
- E002: an import string does not import.
- E003: a number setting out of range.
- E004: SQLite without IMMEDIATE transactions (concurrent writers would deadlock).
- E005: the file storage alias is not in settings.STORAGES.
- E006: AGENTS is not a dict of import strings, or one does not import.
- W001: ENCRYPTION_KEYS is empty (MCP OAuth secrets cannot be stored).
- W002: an in-memory store is configured while DEBUG is off.
- E007: an ENCRYPTION_KEYS entry is not a valid Fernet key.
- E008: DEAD_AFTER is not larger than HEARTBEAT_INTERVAL.
- E009: a size limit above what the database backend can hold.
- E010: MCP_SERVERS is not a dict of server name -> dict.
- E011: STORES names no usable store family, or the deprecated per-store keys mix families.
- E012: PERMISSION_CLASSES, AUTHENTICATION_CLASSES, THROTTLE_CLASSES or SERIALIZERS is malformed
  or names something that does not import (or, for SERIALIZERS, an unknown resource or no serializer).
- E013: ON_USER_DELETE is not "erase", "keep" or "refuse".
- W004: a deprecated per-store key (TURN_STORE ...) is set: STORES replaces them.
- W003: ON_USER_DELETE is "erase" by default while SCOPE_RESOLVER is a project's own (a deleted
  user's pk may not be the scope's user string).

Deployment checks, run by ``manage.py check --deploy`` only:

- W101: a database is SQLite (one machine; replicas need PostgreSQL).
- W102: the default channel layer is the in-memory one (live updates stay in one process).
- W103: a key published in this repository (the example project's or the test suite's).
- W104: DEBUG is on.
- W105: ``TURN_RUNNER = "tasks"`` without a task backend a worker can run (none configured, the
  backport's default, or the immediate or dummy backend).
"""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.db import connections
from django.db.utils import load_backend
from django.utils.module_loading import import_string

from .conf import DEFAULTS, IMPORT_STRINGS, SETTING_NAME, app_settings

POSITIVE_NUMBERS = (
    "HEARTBEAT_INTERVAL",
    "DEAD_AFTER",
    "RECORDING_FLUSH_INTERVAL",
    "CHECKPOINT_INTERVAL",
    "MAX_RUN_TIME",
    "JSON_MAX_DEPTH",
    "PRODUCER_LOCK_TIMEOUT",
    "SEAL_RETRY_FOR",
    "WEBSOCKET_ACCESS_CHECK_INTERVAL",
    "WEBSOCKET_IDLE_POLL_MAX",
    "REAPER_INTERVAL",
    "QUEUED_DEAD_AFTER",
    "MAX_FILE_BYTES",
    "MAX_STATE_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_EVENT_BYTES",
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "SWEEP_BATCH_SIZE",
    "OAUTH_PENDING_TTL",
    "OAUTH_REFRESH_MARGIN",
    "OAUTH_HTTP_TIMEOUT",
    "IMPORT_CLOCK_SKEW",
    "WS_TICKET_TTL",
)

# Caps that are a whole number of 1 or more, or None for no cap.
WHOLE_NUMBERS_OR_NONE = ("WEBSOCKET_MAX_PER_USER", "SSE_MAX_PER_USER", "WS_TICKETS_PER_MINUTE")

# The largest single value each backend stores in a JSON or blob column.
BACKEND_VALUE_LIMITS = {
    "postgresql": 255 * 1024 * 1024,  # jsonb values are capped at 256 MB
    "sqlite": 1_000_000_000,  # SQLITE_MAX_LENGTH default
}


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    errors: list[Any] = []
    configured = getattr(settings, SETTING_NAME, {})
    if not isinstance(configured, dict):
        return [Error(f"{SETTING_NAME} must be a dict.", id="agent_persistence.E001")]
    for key in app_settings.unknown_keys():
        errors.append(
            Error(
                f"Unknown setting {SETTING_NAME}[{key!r}].",
                hint="See docs/reference/settings.md for the keys there are.",
                id="agent_persistence.E001",
            )
        )
    for key in sorted(IMPORT_STRINGS):
        value = app_settings.raw(key)
        if isinstance(value, str):
            try:
                import_string(value)
            except ImportError as exc:
                errors.append(Error(f"{SETTING_NAME}[{key!r}] does not import: {exc}", id="agent_persistence.E002"))
    errors.extend(_check_numbers())
    errors.extend(_check_agents())
    errors.extend(_check_mcp_servers())
    errors.extend(_check_storage())
    errors.extend(_check_keys())
    return errors


def _check_numbers() -> list[Any]:
    errors = []
    for key in POSITIVE_NUMBERS:
        value = app_settings.raw(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            errors.append(Error(f"{SETTING_NAME}[{key!r}] must be a positive number, not {value!r}.", id="agent_persistence.E003"))
    if errors:
        return errors
    if app_settings.raw("DEAD_AFTER") <= app_settings.raw("HEARTBEAT_INTERVAL"):
        errors.append(
            Error(
                f"{SETTING_NAME}['DEAD_AFTER'] must be larger than HEARTBEAT_INTERVAL, or live producers are judged dead.",
                id="agent_persistence.E008",
            )
        )
    if app_settings.raw("DEFAULT_PAGE_SIZE") > app_settings.raw("MAX_PAGE_SIZE"):
        errors.append(Error(f"{SETTING_NAME}['DEFAULT_PAGE_SIZE'] must not exceed MAX_PAGE_SIZE.", id="agent_persistence.E003"))
    for key in WHOLE_NUMBERS_OR_NONE:
        cap = app_settings.raw(key)
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            errors.append(Error(f"{SETTING_NAME}[{key!r}] must be a whole number, 1 or more, or None.", id="agent_persistence.E003"))
    grace = app_settings.raw("SHUTDOWN_GRACE")
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or grace < 0:
        errors.append(Error(f"{SETTING_NAME}['SHUTDOWN_GRACE'] must be a number of seconds, 0 or more, not {grace!r}.",
                            id="agent_persistence.E003"))
    if app_settings.raw("TURN_RUNNER") not in ("inprocess", "tasks"):
        errors.append(Error(f'{SETTING_NAME}[\'TURN_RUNNER\'] must be "inprocess" or "tasks", not '
                            f'{app_settings.raw("TURN_RUNNER")!r}.', id="agent_persistence.E003"))
    lease_ttl = app_settings.raw("REAPER_LEASE_TTL")
    if lease_ttl is not None and (isinstance(lease_ttl, bool) or not isinstance(lease_ttl, (int, float))
                                  or not math.isfinite(lease_ttl) or lease_ttl <= 0):
        errors.append(Error(f"{SETTING_NAME}['REAPER_LEASE_TTL'] must be a positive number of seconds, or None "
                            f"(2 x REAPER_INTERVAL), not {lease_ttl!r}.", id="agent_persistence.E003"))
    attempts = app_settings.raw("MAX_RESUME_ATTEMPTS")
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        errors.append(Error(f"{SETTING_NAME}['MAX_RESUME_ATTEMPTS'] must be a whole number, 1 or more.", id="agent_persistence.E003"))
    return errors


def _check_agents() -> list[Any]:
    agents = app_settings.raw("AGENTS")
    if not isinstance(agents, dict):
        return [Error(f"{SETTING_NAME}['AGENTS'] must be a dict of name -> import path.", id="agent_persistence.E006")]
    errors = []
    for name, path in agents.items():
        try:
            import_string(path) if isinstance(path, str) else None
        except ImportError as exc:
            errors.append(Error(f"Agent {name!r} does not import: {exc}", id="agent_persistence.E006"))
        if not isinstance(path, str):
            errors.append(Error(f"Agent {name!r} must be an import path string.", id="agent_persistence.E006"))
    return errors


def _check_mcp_servers() -> list[Any]:
    servers = app_settings.raw("MCP_SERVERS")
    if not isinstance(servers, dict) or not all(isinstance(name, str) and isinstance(conf, dict) for name, conf in servers.items()):
        return [
            Error(
                f"{SETTING_NAME}['MCP_SERVERS'] must be a dict of server name -> dict of settings.",
                id="agent_persistence.E010",
            )
        ]
    return []


def _check_storage() -> list[Any]:
    alias = app_settings.raw("FILE_STORAGE")
    storages = getattr(settings, "STORAGES", {}) or {}
    if alias not in storages:
        return [
            Error(
                f"{SETTING_NAME}['FILE_STORAGE'] names {alias!r}, which is not in settings.STORAGES.",
                id="agent_persistence.E005",
            )
        ]
    return []


def _check_keys() -> list[Any]:
    from cryptography.fernet import Fernet

    keys = app_settings.raw("ENCRYPTION_KEYS")
    if isinstance(keys, str):
        keys = [keys]
    if not keys:
        return [
            Warning(
                f"{SETTING_NAME}['ENCRYPTION_KEYS'] is empty: MCP OAuth tokens cannot be stored.",
                hint="Generate a key with `python -m agent_persistence.keygen` and keep it out of source control.",
                id="agent_persistence.W001",
            )
        ]
    errors = []
    for position, key in enumerate(keys):
        try:
            Fernet(key)
        except (ValueError, TypeError):
            errors.append(Error(f"{SETTING_NAME}['ENCRYPTION_KEYS'][{position}] is not a valid Fernet key.", id="agent_persistence.E007"))
    return errors


def database_vendor(settings_dict: dict[str, Any]) -> str | None:
    """The vendor (``"sqlite"``, ``"postgresql"`` ...) of a DATABASES entry, without connecting."""
    engine = settings_dict.get("ENGINE")
    if not isinstance(engine, str) or not engine:
        return None
    try:
        return load_backend(engine).DatabaseWrapper.vendor
    except Exception:  # Django's own checks report an engine that does not load.
        return None


def sqlite_without_immediate(databases: dict[str, dict[str, Any]]) -> list[Any]:
    """E004 for every SQLite entry of ``databases`` whose transactions are not IMMEDIATE."""
    errors: list[Any] = []
    for alias, settings_dict in databases.items():
        if database_vendor(settings_dict) != "sqlite":
            continue
        if (settings_dict.get("OPTIONS") or {}).get("transaction_mode") != "IMMEDIATE":
            errors.append(
                Error(
                    f"Database {alias!r} is SQLite without OPTIONS['transaction_mode'] = 'IMMEDIATE'.",
                    hint="Concurrent writers upgrade read locks and fail with 'database is locked'. "
                    "Set DATABASES[...]['OPTIONS']['transaction_mode'] = 'IMMEDIATE' (docs/tutorial/first-agent.md).",
                    id="agent_persistence.E004",
                )
            )
    return errors


# Not database-tagged: read from settings, so plain `manage.py check` (and every runserver/migrate) reports it.
@register(Tags.compatibility)
def check_sqlite_transactions(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    return sqlite_without_immediate(settings.DATABASES)


@register(Tags.database)
def check_databases(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Any]:
    errors: list[Any] = []
    for alias in databases or []:
        connection = connections[alias]
        limit = BACKEND_VALUE_LIMITS.get(connection.vendor)
        if limit is not None:
            for key in ("MAX_FILE_BYTES", "MAX_STATE_BYTES", "MAX_MESSAGE_BYTES"):
                value = app_settings.raw(key)
                if isinstance(value, (int, float)) and value > limit and key != "MAX_FILE_BYTES":
                    errors.append(
                        Error(
                            f"{SETTING_NAME}[{key!r}] = {value} is above what {connection.vendor} stores in one value ({limit}).",
                            id="agent_persistence.E009",
                        )
                    )
    return errors


# Keys published in this repository: anyone can decrypt what they protect.
PUBLISHED_ENCRYPTION_KEYS = frozenset(
    {
        "3q1q0V5zq4yJq8mJ9cY2o3lX6pQJb2b5m5t0Yk8n1dE=",  # example_project/settings.py
        "cw_0x689RpI-jtRR7oE8h_eQsKImvJapLeSbXpwF4e4=",  # tests/settings.py
    }
)
PUBLISHED_SECRET_KEYS = frozenset({"example-project-insecure-development-key", "tests-insecure-key"})
IN_MEMORY_LAYER = "channels.layers.InMemoryChannelLayer"


@register(Tags.security, deploy=True)
def check_deployment(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """``check --deploy``: the embedded defaults and development settings that must not reach production."""
    warnings: list[Any] = []
    for alias, settings_dict in settings.DATABASES.items():
        if database_vendor(settings_dict) == "sqlite":
            warnings.append(
                Warning(
                    f"Database {alias!r} is SQLite: every server process must run on this one machine, "
                    "and writers queue on one lock.",
                    hint="Use PostgreSQL for more than one machine (docs/howto/postgresql-and-redis.md); "
                    "silence agent_persistence.W101 if one machine is the plan.",
                    id="agent_persistence.W101",
                )
            )
    layer = (getattr(settings, "CHANNEL_LAYERS", {}) or {}).get("default") or {}
    if layer.get("BACKEND") == IN_MEMORY_LAYER:
        warnings.append(
            Warning(
                "The default channel layer is InMemoryChannelLayer: live updates reach only sockets of the "
                "process that produces the turn; followers elsewhere poll the recording.",
                hint="Use channels_redis.core.RedisChannelLayer (docs/howto/postgresql-and-redis.md).",
                id="agent_persistence.W102",
            )
        )
    keys = app_settings.raw("ENCRYPTION_KEYS")
    keys = [keys] if isinstance(keys, str) else list(keys or [])
    published = [position for position, key in enumerate(keys) if key in PUBLISHED_ENCRYPTION_KEYS]
    if published or getattr(settings, "SECRET_KEY", None) in PUBLISHED_SECRET_KEYS:
        names = [f"ENCRYPTION_KEYS[{position}]" for position in published]
        if getattr(settings, "SECRET_KEY", None) in PUBLISHED_SECRET_KEYS:
            names.append("SECRET_KEY")
        warnings.append(
            Warning(
                f"{', '.join(names)}: a development key published in this repository (example project or test suite).",
                hint="Generate your own (`python -m agent_persistence.keygen`, Django's get_random_secret_key()) "
                "and read them from the environment.",
                id="agent_persistence.W103",
            )
        )
    if settings.DEBUG:
        warnings.append(
            Warning(
                "DEBUG is on: server errors show tracebacks and settings to clients, and every SQL statement of "
                "the long-running producers is kept in memory.",
                hint="Set DEBUG = False in production (docs/howto/deploy.md).",
                id="agent_persistence.W104",
            )
        )
    warnings.extend(check_turn_runner())
    return warnings


#: Task backends that run no worker: the immediate one runs the task in the web process, the dummy one never.
NO_WORKER_BACKENDS = frozenset({
    "django.tasks.backends.immediate.ImmediateBackend",
    "django.tasks.backends.dummy.DummyBackend",
    "django_tasks.backends.immediate.ImmediateBackend",
    "django_tasks.backends.dummy.DummyBackend",
})


def check_turn_runner() -> list[Any]:
    """W105 (``check --deploy``): ``TURN_RUNNER = "tasks"`` with no task backend that a worker runs."""
    if app_settings.raw("TURN_RUNNER") != "tasks":
        return []
    backend = ((getattr(settings, "TASKS", None) or {}).get("default") or {}).get("BACKEND")
    if backend is not None and backend not in NO_WORKER_BACKENDS:
        return []
    problem = "no TASKS backend is configured" if backend is None else f"the default TASKS backend is {backend}"
    return [
        Warning(
            f'TURN_RUNNER is "tasks" but {problem}: turns would run in the web process (immediate) or never (dummy).',
            hint='Configure a worker backend (django_tasks_db.DatabaseBackend, django_tasks_celery.CeleryBackend) and '
            'run its workers (docs/howto/deploy.md), or set TURN_RUNNER = "inprocess".',
            id="agent_persistence.W105",
        )
    ]


__all__ = ["DEFAULTS", "check_databases", "check_deployment", "check_settings", "check_sqlite_transactions"]


@register(Tags.compatibility)
def check_memory_stores(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """W002: an in-memory store is configured while DEBUG is off (it is for tests, never production)."""
    from .stores.memory import is_memory_store

    if settings.DEBUG:
        return []
    names = sorted(
        name
        for name in app_settings.defaults
        if (name == "STORES" or name.endswith("_STORE")) and is_memory_store(app_settings.raw(name))
    )
    if not names:
        return []
    return [
        Warning(
            f"{SETTING_NAME}[{', '.join(names)}] select the in-memory stores while DEBUG is off: their data lives in "
            "one process's memory, is lost on restart and is not shared with other processes.",
            hint="They are for tests (docs/howto/test-your-agents-in-memory.md); use the ORM stores in production.",
            id="agent_persistence.W002",
        )
    ]


def store_family(store_class: Any) -> str:
    """The backend family a store class belongs to: its ``family`` attribute, else its package."""
    declared = getattr(store_class, "family", None)
    if isinstance(declared, str) and declared:
        return declared
    module = getattr(store_class, "__module__", "") or ""
    if module.startswith("agent_persistence.stores.memory"):
        return "memory"
    if module.startswith("agent_persistence.stores."):
        return "orm"
    return module.rsplit(".", 1)[0]


@register(Tags.compatibility)
def check_store_families(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """E011: ``STORES`` names no usable family, or the deprecated per-store keys mix families.

    ``STORES`` must name a module whose ``stores()`` returns a
    :class:`~agent_persistence.stores.family.Stores` with every store, each
    following its protocol. The turn store's transitions write conversations,
    messages, runs, interrupts, supervision rows and events in one
    transaction, every producer write is fenced through the supervision rows
    of the same family, and artifacts and generation runs read the
    conversations and runs of theirs: a per-store key that swaps one of these
    alone would leave the others writing rows it never sees.
    """
    from .stores.family import SLOTS, FamilyError, family_builder, problems_of

    path = app_settings.raw("STORES")
    try:
        family = family_builder(path)()
    except FamilyError as exc:
        problems = [str(exc)]
    except Exception as exc:  # noqa: BLE001 - a project's own family may fail in any way; say how
        problems = [f"its stores() raised {type(exc).__name__}: {exc}"]
    else:
        problems = problems_of(family)
    if problems:
        return [
            Error(
                f"{SETTING_NAME}['STORES'] = {path!r} is not a usable store family: {'; '.join(problems)}.",
                hint="Name a family module, e.g. agent_persistence.stores.orm.family or "
                "agent_persistence.stores.memory.family (docs/howto/custom-store.md).",
                id="agent_persistence.E011",
            )
        ]
    families: dict[str, list[str]] = {}
    for slot in SLOTS:
        if slot.alone:
            continue
        try:
            store_class = getattr(app_settings, slot.setting) or type(getattr(family, slot.name))
        except Exception:  # noqa: BLE001 - an import string that does not import is E002's to report
            return []
        families.setdefault(store_family(store_class), []).append(slot.setting)
    if len(families) < 2:
        return []
    described = "; ".join(f"{name}: {', '.join(keys)}" for name, keys in sorted(families.items()))
    return [
        Error(
            f"{SETTING_NAME} mixes store families ({described}).",
            hint="Name one family in STORES instead of the deprecated per-store keys (docs/howto/custom-store.md).",
            id="agent_persistence.E011",
        )
    ]


@register(Tags.compatibility)
def check_deprecated_store_keys(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """W004: a deprecated per-store key is set; ``STORES`` names the whole family instead."""
    from .stores import deprecated_store_keys

    keys = deprecated_store_keys()
    if not keys:
        return []
    return [
        Warning(
            f"{SETTING_NAME}[{', '.join(keys)}] are deprecated and will be removed in the next release: "
            f"{SETTING_NAME}['STORES'] names the whole store family.",
            hint="Set STORES to agent_persistence.stores.memory.family (instead of MEMORY_STORES), "
            "agent_persistence.stores.orm.family, or your own family module (docs/reference/settings.md#stores).",
            id="agent_persistence.W004",
        )
    ]


@register(Tags.compatibility)
def check_blob_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """E005 for ``BLOB_STORAGE``, E003 for ``MAX_BLOB_BYTES`` (artifacts of another family are E011's)."""
    errors: list[Any] = []
    alias = app_settings.raw("BLOB_STORAGE")
    if alias not in (getattr(settings, "STORAGES", {}) or {}):
        errors.append(
            Error(f"{SETTING_NAME}['BLOB_STORAGE'] names {alias!r}, which is not in settings.STORAGES.",
                  id="agent_persistence.E005")
        )
    limit = app_settings.raw("MAX_BLOB_BYTES")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        errors.append(
            Error(f"{SETTING_NAME}['MAX_BLOB_BYTES'] must be a whole number of bytes, 1 or more, not {limit!r}.",
                  id="agent_persistence.E003")
        )
    return errors


# -- user erasure (issue 25) -------------------------------------------------------------------


@register(Tags.compatibility)
def check_on_user_delete(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """E013: ``ON_USER_DELETE`` is not one of "erase", "keep", "refuse"."""
    from .conf import ON_USER_DELETE_CHOICES

    value = app_settings.raw("ON_USER_DELETE")
    if value not in ON_USER_DELETE_CHOICES:
        return [
            Error(
                f"{SETTING_NAME}['ON_USER_DELETE'] must be one of {', '.join(map(repr, ON_USER_DELETE_CHOICES))}, not {value!r}.",
                hint="See docs/howto/erase-and-export-users.md.",
                id="agent_persistence.E013",
            )
        ]
    resolver = app_settings.raw("SCOPE_RESOLVER")
    if "ON_USER_DELETE" not in app_settings.user_settings and resolver != app_settings.defaults["SCOPE_RESOLVER"]:
        # W003: the receiver erases the rows of str(user.pk), which a project's own resolver may map to another principal.
        return [
            Warning(
                f"{SETTING_NAME}['ON_USER_DELETE'] is \"erase\" by default, and SCOPE_RESOLVER is your own: deleting a "
                "Django user erases every row whose scope user is str(user.pk), which your resolver may not use.",
                hint='Set ON_USER_DELETE to "erase" if the scope user is str(user.pk), or to "keep" and call '
                     "agent_persistence.erasure.erase_user yourself. See docs/howto/erase-and-export-users.md.",
                id="agent_persistence.W003",
            )
        ]
    return []


#: The API's class-list settings, and whether None (the host's REST_FRAMEWORK default) is allowed.
API_CLASS_LISTS = {"PERMISSION_CLASSES": False, "AUTHENTICATION_CLASSES": True, "THROTTLE_CLASSES": True}


def _imported(key: str, value: Any) -> tuple[Any, str | None]:
    """(the class, None) for an import string or a class; (None, why) otherwise."""
    if isinstance(value, type):
        return value, None
    if not isinstance(value, str):
        return None, f"{SETTING_NAME}[{key!r}] holds {value!r}, which is not an import string."
    try:
        return import_string(value), None
    except ImportError as exc:
        return None, f"{SETTING_NAME}[{key!r}]: {value!r} does not import: {exc}"


@register(Tags.compatibility)
def check_api_extension_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """E012 for the DRF extension points of the API (docs/howto/customize-the-api.md)."""
    from rest_framework.serializers import BaseSerializer

    from .conf import SERIALIZER_RESOURCES

    errors: list[Any] = []
    for key, none_allowed in API_CLASS_LISTS.items():
        value = app_settings.raw(key)
        if value is None and none_allowed:
            continue
        if not isinstance(value, (list, tuple)):
            allowed = "a list of import strings, or None for the host's REST_FRAMEWORK default" if none_allowed else "a list of import strings"
            errors.append(Error(f"{SETTING_NAME}[{key!r}] must be {allowed}, not {value!r}.", id="agent_persistence.E012"))
            continue
        for item in value:
            _, why = _imported(key, item)
            if why:
                errors.append(Error(why, id="agent_persistence.E012"))
    serializers = app_settings.raw("SERIALIZERS")
    if not isinstance(serializers, dict):
        return [*errors, Error(f"{SETTING_NAME}['SERIALIZERS'] must be a dict of resource name -> import string.",
                               id="agent_persistence.E012")]
    for resource, path in serializers.items():
        if resource not in SERIALIZER_RESOURCES:
            errors.append(
                Error(f"{SETTING_NAME}['SERIALIZERS'] names the unknown resource {resource!r}.",
                      hint=f"The resources are: {', '.join(sorted(SERIALIZER_RESOURCES))}.", id="agent_persistence.E012")
            )
            continue
        serializer, why = _imported("SERIALIZERS", path)
        if why:
            errors.append(Error(why, id="agent_persistence.E012"))
        elif not (isinstance(serializer, type) and issubclass(serializer, BaseSerializer)):
            errors.append(Error(f"{SETTING_NAME}['SERIALIZERS'][{resource!r}] is not a DRF serializer class.",
                                id="agent_persistence.E012"))
    return errors
