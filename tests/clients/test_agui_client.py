"""``@ag-ui/client`` (from npm) against two real servers: ``tests/clients/agui/``, run from pytest.

So ``make test`` runs it too. ``npm ci`` installs from the folder's lockfile
when ``node_modules`` is missing or stale against it. The Node tests
(``node --test``) start two real servers with :mod:`tests.clients.serve`
(this interpreter; PostgreSQL when ``DATABASE_URL`` is set, Redis when
``REDIS_URL`` is) and consume turns with ``HttpAgent`` over server-sent
events, one of them cut mid-answer and resumed on the other server with
``Last-Event-ID``. Without Node the test is skipped, except under CI (``CI``
set), where Node is part of the machine and its absence is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.npm import npm_ci

PACKAGE = Path(__file__).resolve().parent / "agui"
HAVE_NODE = shutil.which("node") is not None and shutil.which("npm") is not None

pytestmark = pytest.mark.skipif(not HAVE_NODE and not os.environ.get("CI"), reason="Node.js (node, npm) is not installed")


def run(*command: str, timeout: float) -> subprocess.CompletedProcess[str]:
    # A slower answer than serve.py's default, so the cut usually lands while the turn is live.
    env = {**os.environ, "AP_PYTHON": sys.executable, "AP_CHUNK_DELAY": "0.08", "NO_COLOR": "1"}
    return subprocess.run(command, check=False, cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed() -> None:
    """``npm ci`` when node_modules is missing or stale against the lockfile."""
    assert HAVE_NODE, "CI runs the AG-UI client tests: Node.js (node, npm) must be installed"
    npm_ci(PACKAGE)


@pytest.mark.timeout(400)
def test_ag_ui_client_follows_and_resumes_a_turn_on_two_real_servers(installed: None) -> None:
    result = run("node", "--test", "--test-reporter=spec", "test/", timeout=390)
    output = f"{result.stdout[-8000:]}\n{result.stderr[-4000:]}"
    assert result.returncode == 0, output
    assert "ℹ pass 5" in result.stdout and "ℹ fail 0" in result.stdout, output
