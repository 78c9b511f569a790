"""Settings of the AG-UI server processes (``tests/api/test_agui_streams.py``): the websocket servers' settings
(``AP_DB_POOL``, Django's psycopg pool on PostgreSQL, is :mod:`tests.settings`'), plus ``AP_SSE_MAX_PER_USER``:
the ``SSE_MAX_PER_USER`` cap.
"""

from __future__ import annotations

import os

from tests.realtime.server_settings import *  # noqa: F401,F403
from tests.realtime.server_settings import AGENT_PERSISTENCE

if os.environ.get("AP_SSE_MAX_PER_USER"):
    AGENT_PERSISTENCE = {**AGENT_PERSISTENCE, "SSE_MAX_PER_USER": int(os.environ["AP_SSE_MAX_PER_USER"])}
