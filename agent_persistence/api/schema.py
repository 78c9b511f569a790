"""OpenAPI schema helpers: drf-spectacular's ``extend_schema``, bound to its own AutoSchema, and the served schema.

drf-spectacular builds a method-level ``@extend_schema`` on the host's
``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]``; the host should not have to set it
for this app, so the views use this ``extend_schema``, which builds on
``drf_spectacular.openapi.AutoSchema`` whatever the host's settings say.

The schema's paths are relative to where the host includes
``agent_persistence.api.urls``; :func:`complete_schema` (a drf-spectacular
postprocessing hook) adds what a generated client or a stateful fuzzer needs:

- ``servers``: one entry, the mount prefix (``/api`` for
  ``path("api/", include("agent_persistence.api.urls"))``), found by reversing
  the app's own route, so it follows the host's URLconf and ``SCRIPT_NAME``;
- ``format: uuid`` on every id path parameter (``*_id``); the ranges of ``limit``,
  ``offset`` and the event cursors; the form of ``If-Match``; the registered
  agents as the ``enum`` of a turn's ``agent``;
- ``additionalProperties: false`` on request bodies, which refuse undeclared fields;
- OpenAPI links from every create (conversation, message, file, task, turn) to
  every operation whose path ids its response provides (:data:`CREATES`).
"""

from __future__ import annotations

from typing import Any, Callable

from django.urls import NoReverseMatch, reverse

from ..conf import app_settings

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema as spectacular_extend_schema
from drf_spectacular.views import SpectacularAPIView

#: Component names for enums whose field names collide (run and interrupt ``status``, ...).
ENUM_NAME_OVERRIDES = {
    "RunStatusEnum": "agent_persistence.models.RunStatus",
    "InterruptStatusEnum": "agent_persistence.models.InterruptStatus",
    "InterruptKindEnum": "agent_persistence.models.InterruptKind",
    "TaskStatusEnum": "agent_persistence.models.TaskStatus",
    "RoleEnum": "agent_persistence.models.Role",
    "LastTurnStatusEnum": "agent_persistence.models.LastTurnStatus",
    "GenerationStatusEnum": "agent_persistence.statuses.GenerationStatus",
    "GenerationKindEnum": "agent_persistence.statuses.GenerationKind",
}

#: Each create's operationId -> (its success status, {path parameter: runtime expression giving it}).
CREATES: dict[str, tuple[str, dict[str, str]]] = {
    "conversations_create": ("201", {"conversation_id": "$response.body#/id"}),
    "messages_create": (
        "201",
        {"conversation_id": "$response.body#/conversation_id", "message_id": "$response.body#/id"},
    ),
    "files_create": ("201", {"file_id": "$response.body#/id"}),
    "tasks_create": ("201", {"task_id": "$response.body#/id"}),
    "turns_start": ("202", {"conversation_id": "$response.body#/conversation_id", "run_id": "$response.body#/run_id"}),
    "generation_runs_create": ("200", {"generation_run_id": "$response.body#/id"}),
}


def mount_prefix() -> str:
    """Where the host mounts the API's URLconf (``/api`` for ``path("api/", include(...))``); ``""`` at the root."""
    try:
        listing = reverse("agent_persistence:conversation-list")
    except NoReverseMatch:
        return ""
    return listing.removesuffix("conversations/").rstrip("/")


def _path_parameters(operation: dict[str, Any]) -> list[dict[str, Any]]:
    return [parameter for parameter in operation.get("parameters", []) if parameter.get("in") == "path"]


def query_bounds() -> dict[str, dict[str, Any]]:
    """The ranges the listings accept for their numeric query parameters (anything else is 400)."""
    from ..stores.base import MAX_OFFSET

    return {
        "limit": {"type": "integer", "minimum": 1, "maximum": app_settings.MAX_PAGE_SIZE},
        "offset": {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET},
        "after": {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET},
        "before": {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET},
    }


#: ``If-Match``: a version in quotes (``"3"``, ``W/"3"``) or ``*``, as ``views.conversations.IF_MATCH`` reads it.
IF_MATCH_PATTERN = r'^(\*|(W/)?"[0-9]{1,18}")$'


def _bound_parameters(operation: dict[str, Any], bounds: dict[str, dict[str, Any]]) -> None:
    for parameter in operation.get("parameters", []):
        schema = parameter.get("schema", {})
        if parameter.get("in") == "path" and parameter["name"].endswith("_id"):
            parameter["schema"] = {"type": "string", "format": "uuid"}
        elif parameter.get("in") == "query" and parameter["name"] in bounds and schema.get("type") == "integer":
            parameter["schema"] = dict(bounds[parameter["name"]])
        elif parameter.get("in") == "header" and parameter["name"] == "If-Match":
            parameter["schema"] = {"type": "string", "pattern": IF_MATCH_PATTERN}


#: The JSON policy (``agent_persistence.json_policy``) as a schema: what a request may hold where the
#: API takes any JSON value (content, metadata, state, results). Strings and keys without NUL, numbers
#: within the signed 64-bit range, arrays and objects of such values. The schema spells out
#: :data:`SPELLED_DEPTH` levels without recursion (recursive schemas lose their constraints in most
#: generators past a few levels); the API accepts nesting up to ``JSON_MAX_DEPTH``.
JSON_VALUE_NAME = "JSONValue"
JSON_VALUE_REF = {"$ref": f"#/components/schemas/{JSON_VALUE_NAME}"}
NO_NUL_PATTERN = "^[^\\u0000]*$"
SPELLED_DEPTH = 2


def _json_level_name(level: int) -> str:
    return JSON_VALUE_NAME if level == 0 else f"{JSON_VALUE_NAME}Level{level}"


def json_value_branches(level: int = 0) -> list[dict[str, Any]]:
    """The non-null branches of the JSONValue at ``level`` (scalars only at the deepest level)."""
    from ..json_policy import MAX_INTEGER, MIN_INTEGER

    branches: list[dict[str, Any]] = [
        {"type": "string", "pattern": NO_NUL_PATTERN},
        {"type": "number", "minimum": MIN_INTEGER, "maximum": MAX_INTEGER},
        {"type": "boolean"},
    ]
    if level < SPELLED_DEPTH:
        child = {"$ref": f"#/components/schemas/{_json_level_name(level + 1)}"}
        branches += [
            {"type": "array", "items": child},
            {"type": "object", "additionalProperties": child, "propertyNames": {"pattern": NO_NUL_PATTERN}},
        ]
    return branches


def _is_any_json(schema: Any) -> bool:
    return isinstance(schema, dict) and not {"type", "$ref", "anyOf", "oneOf", "allOf", "enum", "not"} & set(schema)


def _policed(schema: dict[str, Any]) -> dict[str, Any]:
    """A request schema with every "any JSON" part replaced by the policy's JSONValue."""
    if _is_any_json(schema):
        extra = {key: value for key, value in schema.items() if key in ("description", "nullable", "readOnly", "writeOnly")}
        return {"anyOf": [JSON_VALUE_REF], "nullable": True, **extra} if extra.get("nullable", True) else {**JSON_VALUE_REF}
    policed = dict(schema)
    if schema.get("type") == "string" and "format" not in schema and "enum" not in schema and "pattern" not in schema:
        policed["pattern"] = NO_NUL_PATTERN
    if isinstance(schema.get("properties"), dict):
        policed["properties"] = {name: _policed(item) for name, item in schema["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            policed[key] = JSON_VALUE_REF if _is_any_json(schema[key]) else _policed(schema[key])
    if isinstance(schema.get("additionalProperties"), dict):
        policed["propertyNames"] = {"pattern": NO_NUL_PATTERN}  # keys are strings too: no NUL
    return policed


def _apply_json_policy(result: dict[str, Any]) -> None:
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    for name in [name for name in schemas if name.endswith("Request")]:
        schemas[name] = _policed(schemas[name])
    for level in range(SPELLED_DEPTH + 1):
        schemas[_json_level_name(level)] = {
            "description": "A JSON value: no NUL in strings or keys, numbers within -2**63 .. 2**63-1.",
            "nullable": True,
            "anyOf": json_value_branches(level),
        }


def _registered_agents(result: dict[str, Any]) -> None:
    """A turn's ``agent`` is one of the host's registered agents: say which, and use one in the examples."""
    agents = sorted(app_settings.AGENTS)
    start = result.get("components", {}).get("schemas", {}).get("StartTurnRequest", {})
    if "content" in start.get("properties", {}):
        # A user message has content: any JSON value but null.
        description = start["properties"]["content"].get("description", "")
        start["properties"]["content"] = {"anyOf": json_value_branches(), "description": description}
    if not agents or "agent" not in start.get("properties", {}):
        return
    start["properties"]["agent"] = {**start["properties"]["agent"], "enum": agents}
    for methods in result.get("paths", {}).values():
        operation = methods.get("post", {})
        if operation.get("operationId") != "turns_start":
            continue
        for media in operation.get("requestBody", {}).get("content", {}).values():
            for example in media.get("examples", {}).values():
                if isinstance(example.get("value"), dict) and "agent" in example["value"]:
                    example["value"]["agent"] = agents[0]


def complete_schema(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: ``servers``, parameter formats and ranges, links (see the module)."""
    result["servers"] = [{"url": mount_prefix() or "/", "description": "Where the host mounts the API."}]
    bounds = query_bounds()
    operations: list[dict[str, Any]] = []
    for methods in result.get("paths", {}).values():
        for operation in methods.values():
            if not isinstance(operation, dict) or "operationId" not in operation:
                continue
            operations.append(operation)
            _bound_parameters(operation, bounds)
    _apply_json_policy(result)
    _registered_agents(result)
    # Input serializers are strict (StrictSerializer: an undeclared field is 400 unknown_field).
    for name, component in result.get("components", {}).get("schemas", {}).items():
        if name.endswith("Request") and component.get("type") == "object" and "properties" in component:
            component["additionalProperties"] = False
    by_id = {operation["operationId"]: operation for operation in operations}
    for create_id, (status, provided) in CREATES.items():
        create = by_id.get(create_id)
        if create is None or status not in create.get("responses", {}):
            continue
        links = {}
        for target in operations:
            names = [parameter["name"] for parameter in _path_parameters(target)]
            if target is create or not names or not set(names) <= set(provided):
                continue
            links[target["operationId"]] = {
                "operationId": target["operationId"],
                "parameters": {name: provided[name] for name in names},
                "description": f"The {'/'.join(names)} of what {create_id} made, for {target['operationId']}.",
            }
        if links:
            create["responses"][status]["links"] = links
    return result


SPECTACULAR_SETTINGS = {
    "TITLE": "agent_persistence API",
    "DESCRIPTION": "Durable AI-agent conversations and resumable turns.",
    "VERSION": "1",
    "ENUM_NAME_OVERRIDES": ENUM_NAME_OVERRIDES,
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "agent_persistence.api.schema.complete_schema",
    ],
}


def extend_schema(*args: Any, **kwargs: Any) -> Callable[[Any], Any]:
    """``drf_spectacular.utils.extend_schema`` built on drf-spectacular's AutoSchema."""
    decorate = spectacular_extend_schema(*args, **kwargs)

    def decorator(view_or_method: Any) -> Any:
        if getattr(view_or_method, "schema", None) is None and not getattr(view_or_method, "kwargs", {}).get("schema"):
            view_or_method.schema = AutoSchema
        return decorate(view_or_method)

    return decorator


class SchemaView(SpectacularAPIView):
    """The OpenAPI 3 document of this app's API (``?format=json`` for JSON)."""

    schema = None  # the schema endpoint is left out of the schema itself
    urlconf = "agent_persistence.api.urls"
    custom_settings = SPECTACULAR_SETTINGS
