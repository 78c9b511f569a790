"""``.ci/package``, CI's packaging step, without running it (it takes minutes; CI runs it).

The script parses (``bash -n``), is executable, stops on the first error of a step, cleans its
temporary folder on every exit, and holds its three steps: the sdist and wheel built and checked by
twine, the wheel in a fresh virtualenv running the checks and docs tests from a copy without the
package, the npm tarball in a fresh project running the client's unit tests. Every test file it
names exists, so a renamed test cannot drop out of the packaging step unnoticed.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / ".ci" / "package"


def test_the_script_parses_and_is_executable() -> None:
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert os.access(SCRIPT, os.X_OK)
    lines = SCRIPT.read_text().splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -euo pipefail" in lines


def test_the_three_steps_are_there() -> None:
    text = SCRIPT.read_text()
    steps = {
        "build": ['-m build --outdir "$DIST" "$SOURCE"', "twine\" --no-color check --strict"],
        "wheel": ['-m venv --without-pip "$VENV"', 'uv" pip install', '"$wheel[server,integrations]"', 'rm -rf "$PROJECT/agent_persistence"',
                  "agent_persistence.__file__", "is_relative_to(site)", "pytest.main("],
        "client": ['npm pack --pack-destination "$PACK"', 'npm install --prefer-offline --loglevel=error "$tarball"',
                   "@agent-persistence/client", "npx vitest run", "[ ! -e src ]"],
        "cleanup": ["trap finish EXIT", 'rm -rf "$WORK"', 'export TMPDIR="$WORK/tmp"'],
    }
    for step, needles in steps.items():
        for needle in needles:
            assert needle in text, f"{step}: {needle!r} is not in .ci/package"
    for number, function in enumerate(("build_and_check", "wheel_in_a_fresh_venv", "client_tarball_in_a_fresh_project")):
        assert re.search(rf"^{function}\(\) {{$", text, re.M), function
        assert re.search(rf"^\s*step {number} {function}\b", text, re.M), f"step {number} does not run {function}"


def test_every_test_file_it_runs_exists() -> None:
    names = re.findall(r"\btests/[\w/*]+\.py\b", SCRIPT.read_text())
    assert "tests/newcomer/test_docs*.py" in names and "tests/newcomer/test_package.py" in names
    for name in names:
        assert glob.glob(str(ROOT / name)), f".ci/package runs {name}, which matches no file"


def test_build_twine_and_uv_are_in_the_test_extra() -> None:
    """``make venv`` installs what the script runs from the suite's virtualenv."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert {re.split(r"[<>=\[ ]", requirement)[0] for requirement in extra} >= {"build", "twine", "uv"}


def test_the_client_package_carries_the_repositorys_licence() -> None:
    """npm packs clients/typescript/LICENSE into the tarball (.ci/package checks it is there): the same text as the root's."""
    root = Path(__file__).resolve().parents[1]
    assert (root / "clients/typescript/LICENSE").read_text() == (root / "LICENSE").read_text()
