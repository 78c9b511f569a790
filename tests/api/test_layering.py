"""Imports point one way: the OAuth core never imports the HTTP edge (``agent_persistence.api``).

The MCP OAuth views live in ``api/views/oauth.py``; ``agent_persistence.oauth`` (store,
repository, client, tokens) must import without pulling in DRF views, so there is no
``oauth`` <-> ``api`` import cycle.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

PROBE = """
import sys, pkgutil, importlib, django
django.setup()
import agent_persistence.oauth as oauth
for module in pkgutil.iter_modules(oauth.__path__):
    importlib.import_module(f"agent_persistence.oauth.{module.name}")
leaked = sorted(name for name in sys.modules if name.startswith("agent_persistence.api"))
print(",".join(leaked))
"""


def test_the_oauth_package_imports_nothing_of_the_api() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"DJANGO_SETTINGS_MODULE": "tests.settings", "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "", f"agent_persistence.oauth imports {result.stdout.strip()}"


def test_the_oauth_views_are_served_from_the_api_package() -> None:
    from agent_persistence.api.routes import oauth as routes
    from agent_persistence.api.views import oauth as views

    assert {pattern.callback.view_class for pattern in routes.urlpatterns} == {
        views.IntegrationListView,
        views.IntegrationView,
        views.AuthorizeView,
        views.CallbackView,
    }
    assert not (ROOT / "agent_persistence" / "oauth" / "views.py").exists()
