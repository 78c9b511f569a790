"""The TypeScript client (``clients/typescript/``): its type check and its vitest suite, from pytest.

So ``make test`` runs them too. ``npm ci`` runs only when ``node_modules`` is
missing or ``package-lock.json`` changed since the last install. The vitest
suite starts two real servers with :mod:`tests.clients.serve` (this
interpreter; PostgreSQL when ``DATABASE_URL`` is set, Redis when
``REDIS_URL`` is). Skipped only when Node is not installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.npm import npm_ci

PACKAGE = Path(__file__).resolve().parent.parent.parent / "clients" / "typescript"

pytestmark = pytest.mark.skipif(shutil.which("node") is None or shutil.which("npm") is None, reason="Node.js (node, npm) is not installed")


def run(*command: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AP_PYTHON": sys.executable, "NO_COLOR": "1"}
    return subprocess.run(command, check=False, cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed() -> None:
    """``npm ci`` when node_modules is missing or stale against the lockfile."""
    npm_ci(PACKAGE)


@pytest.mark.timeout(180)
def test_the_client_type_checks_and_its_generated_types_match_the_schema(installed: None) -> None:
    result = run("npm", "run", "--silent", "typecheck", timeout=170)
    assert result.returncode == 0, f"{result.stdout[-5000:]}\n{result.stderr[-5000:]}"


@pytest.mark.timeout(300)
def test_the_vitest_suite_passes_against_two_real_servers(installed: None) -> None:
    result = run("npx", "vitest", "run", timeout=290)
    assert result.returncode == 0, f"{result.stdout[-8000:]}\n{result.stderr[-4000:]}"
    assert " passed" in result.stdout and " failed" not in result.stdout, result.stdout[-3000:]
