"""``manage.py crash_test`` on the example project: two real servers, a SIGKILL, nothing lost."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_crash_test_command_passes_on_the_embedded_default(tmp_path: Path) -> None:
    env = {**os.environ, "AGENT_PERSISTENCE_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "example_project.settings"}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    for command in (["migrate", "-v0"], ["demo_user"]):
        subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env, check=True, capture_output=True)
    result = subprocess.run(
        [sys.executable, "manage.py", "crash_test", "--user", "demo", "--agent", "long", "--kill-after", "300"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = result.stdout
    assert "lost characters        0" in report
    assert "duplicated characters  0" in report
    assert "runs that finished     1 (duplicate producers: 0)" in report
    assert "runs recorded as lost  1" in report
    assert report.rstrip().endswith("PASSED")
