"""Settings of a server process on the in-memory store family with no database at all.

``DATABASES`` names Django's dummy backend, so any ORM query the server makes
raises ``ImproperlyConfigured``: a request or socket that reached the ORM
would fail where the test can see it. Requests authenticate by the
``X-Test-User`` header (:class:`tests.realtime.memory_auth.HeaderAuthentication`),
and sessions live in signed cookies, so neither reads a table either.
"""

from __future__ import annotations

from tests.realtime.server_settings import *  # noqa: F401,F403
from tests.realtime.server_settings import AGENT_PERSISTENCE

DATABASES = {"default": {"ENGINE": "django.db.backends.dummy"}}
SESSION_ENGINE = "django.contrib.sessions.backends.signed_cookies"

REST_FRAMEWORK = {"DEFAULT_AUTHENTICATION_CLASSES": ["tests.realtime.memory_auth.HeaderAuthentication"]}

AGENT_PERSISTENCE = {
    **AGENT_PERSISTENCE,
    "STORES": "agent_persistence.stores.memory.family",
    "SCOPE_RESOLVER": "tests.realtime.memory_auth.header_scope",
}
