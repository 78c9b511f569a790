"""ASGI application of the test suite, served by the live-server tests (``tests/api/live.py``).

Settings are ``tests.settings``; a test passes ``AP_TEST_DB_NAME`` so the
server works on that test's database.
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

application = get_asgi_application()
