"""The code has no unused imports, undefined names or syntax errors (ruff's pyflakes rules)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "F,E9", "--no-cache", "--output-format", "concise",
         "agent_persistence", "tests", "benchmarks", "example_project"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
