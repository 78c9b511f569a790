"""The MCP servers users may authorize, from ``AGENT_PERSISTENCE["MCP_SERVERS"]``.

Each entry names its endpoints, or an ``issuer`` whose RFC 8414 metadata names
them (fetched once per process and server)::

    "MCP_SERVERS": {
        "github": {
            "issuer": "https://auth.example.com",   # or the two endpoints below
            "authorization_endpoint": "https://auth.example.com/authorize",
            "token_endpoint": "https://auth.example.com/token",
            "registration_endpoint": "https://auth.example.com/register",  # optional
            "client_id": "...", "client_secret": "...",  # optional: else registered
            "token_endpoint_auth_method": "client_secret_basic",  # or client_secret_post, none
            "scopes": ["read", "write"],
            "resource": "https://mcp.example.com/",  # RFC 8707, optional
        }
    }
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from ..conf import app_settings
from .client import discover
from .exceptions import UnknownServer

KNOWN_KEYS = frozenset(
    {
        "issuer",
        "authorization_endpoint",
        "token_endpoint",
        "registration_endpoint",
        "client_id",
        "client_secret",
        "token_endpoint_auth_method",
        "scopes",
        "resource",
        "client_name",
    }
)

_metadata_cache: dict[str, dict[str, Any]] = {}
_metadata_lock = threading.Lock()


@dataclass(frozen=True)
class ServerConfig:
    name: str
    authorization_endpoint: str
    token_endpoint: str
    registration_endpoint: str | None
    client_id: str | None
    client_secret: str | None
    token_endpoint_auth_method: str
    scopes: tuple[str, ...]
    resource: str | None
    client_name: str


def configured_servers() -> list[str]:
    return sorted(app_settings.MCP_SERVERS)


def server_config(name: str) -> ServerConfig:
    """The configuration of server ``name`` (UnknownServer when it is not configured)."""
    entry = app_settings.MCP_SERVERS.get(name) if isinstance(name, str) else None
    if not isinstance(entry, dict):
        raise UnknownServer(server=name if isinstance(name, str) else None)
    metadata: dict[str, Any] = {}
    if entry.get("issuer") and not (entry.get("authorization_endpoint") and entry.get("token_endpoint")):
        metadata = _metadata(entry["issuer"])
    client_secret = entry.get("client_secret")
    default_method = "client_secret_basic" if client_secret or not entry.get("client_id") else "none"
    return ServerConfig(
        name=name,
        authorization_endpoint=entry.get("authorization_endpoint") or metadata["authorization_endpoint"],
        token_endpoint=entry.get("token_endpoint") or metadata["token_endpoint"],
        registration_endpoint=entry.get("registration_endpoint") or metadata.get("registration_endpoint"),
        client_id=entry.get("client_id"),
        client_secret=client_secret,
        token_endpoint_auth_method=entry.get("token_endpoint_auth_method") or default_method,
        scopes=tuple(entry.get("scopes") or ()),
        resource=entry.get("resource"),
        client_name=entry.get("client_name") or "agent_persistence",
    )


def _metadata(issuer: str) -> dict[str, Any]:
    with _metadata_lock:
        cached = _metadata_cache.get(issuer)
    if cached is None:
        cached = discover(issuer)
        with _metadata_lock:
            _metadata_cache[issuer] = cached
    return cached


def forget_metadata() -> None:
    """Drop discovered metadata (tests; a server that moved its endpoints)."""
    with _metadata_lock:
        _metadata_cache.clear()
