"""Settings of the AG-UI server processes (``tests/api/test_agui_streams.py``): the websocket servers' settings, plus

- ``AP_DB_POOL`` = ``"min,max,timeout"``: Django's psycopg pool on PostgreSQL (``DATABASES OPTIONS["pool"]``);
- ``AP_SSE_MAX_PER_USER``: the ``SSE_MAX_PER_USER`` cap.
"""

from __future__ import annotations

import os

from tests.realtime.server_settings import *  # noqa: F401,F403
from tests.realtime.server_settings import AGENT_PERSISTENCE, DATABASES

if os.environ.get("AP_DB_POOL") and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    min_size, max_size, timeout = (float(part) for part in os.environ["AP_DB_POOL"].split(","))
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {"min_size": int(min_size), "max_size": int(max_size), "timeout": timeout}

if os.environ.get("AP_SSE_MAX_PER_USER"):
    AGENT_PERSISTENCE = {**AGENT_PERSISTENCE, "SSE_MAX_PER_USER": int(os.environ["AP_SSE_MAX_PER_USER"])}
