"""The built client shipped as a static asset is up to date with ``clients/typescript/src``.

``agent_persistence/static/agent_persistence/client/`` holds the ESM build of the
client (``npm run build:static``: ``tsc -p tsconfig.static.json``, no bundler), which
the demo page imports and any project serving the app's static files can import
(``{% static 'agent_persistence/client/index.js' %}``). This test builds it again
into a temporary folder and compares every file, so a change to the sources that
was not rebuilt and committed fails here. Skipped only when Node is not installed.
"""

from __future__ import annotations

import filecmp
import shutil
from pathlib import Path

import pytest

from tests.clients.test_typescript_client import PACKAGE, installed, run  # noqa: F401 - installed is a fixture

SHIPPED = PACKAGE.parent.parent / "agent_persistence" / "static" / "agent_persistence" / "client"

pytestmark = pytest.mark.skipif(shutil.which("node") is None or shutil.which("npm") is None, reason="Node.js (node, npm) is not installed")


@pytest.mark.timeout(180)
@pytest.mark.usefixtures("installed")
def test_the_shipped_static_client_is_what_the_sources_build(tmp_path: Path) -> None:
    result = run("npx", "tsc", "-p", "tsconfig.static.json", "--outDir", str(tmp_path), timeout=170)
    assert result.returncode == 0, f"{result.stdout[-5000:]}\n{result.stderr[-5000:]}"
    built = sorted(path.name for path in tmp_path.iterdir())
    assert built == sorted(path.name for path in SHIPPED.iterdir()), "run `npm run build:static` in clients/typescript and commit"
    stale = [name for name in built if not filecmp.cmp(tmp_path / name, SHIPPED / name, shallow=False)]
    assert not stale, f"{stale} differ from what the sources build: run `npm run build:static` in clients/typescript and commit"
    assert "react" not in (SHIPPED / "index.js").read_text()  # the browser build has no bare imports
