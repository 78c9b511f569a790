"""``manage.py crash_test`` on the example project: two real servers and a SIGKILL, or (``--deploy``) a rolling restart of three; nothing lost."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.example_db import ROOT, copy_example_db, example_env


def test_crash_test_command_passes_on_the_embedded_default(tmp_path: Path) -> None:
    env = example_env(tmp_path)
    copy_example_db(tmp_path)
    result = subprocess.run(
        [sys.executable, "manage.py", "crash_test", "--user", "demo", "--agent", "long", "--kill-after", "300"],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = result.stdout
    assert "lost characters        0" in report
    assert "duplicated characters  0" in report
    assert "runs that finished     1 (duplicate producers: 0)" in report
    assert "runs recorded as lost  1" in report
    assert report.rstrip().endswith("PASSED")


def test_crash_test_deploy_hands_every_turn_off_through_a_rolling_restart_on_the_embedded_default(tmp_path: Path) -> None:
    """``--deploy``: three servers on SQLite and the in-memory layer, each SIGTERMed in turn while turns stream.

    No layer spans the servers, so nothing is announced: a survivor's reaper sweep claims each handed-off
    turn (``--reaper-interval``), and followers on other servers read the recording. Nothing is lost or
    duplicated, no turn is taken over as dead, and every turn completes.
    """
    env = example_env(tmp_path)
    copy_example_db(tmp_path)
    result = subprocess.run(
        [sys.executable, "manage.py", "crash_test", "--user", "demo", "--agent", "long", "--deploy", "--turns", "3",
         "--kill-after", "100", "--grace", "1", "--reaper-interval", "0.25"],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = result.stdout
    assert "claimed by a survivor's reaper sweep" in report, report
    assert "lost characters        0\n" in report, report
    assert "duplicated characters  0 " in report, report
    assert "tool calls repeated    0 " in report, report
    assert "stop reasons           completed 3\n" in report, report
    handed_off = re.search(r"turns handed off +(\d+) hand-offs \((\d+) turns taken over as dead", report)
    assert handed_off is not None and int(handed_off[1]) >= 1 and handed_off[2] == "0", report
    assert report.rstrip().endswith("PASSED")


def test_crash_test_deploy_refuses_fewer_than_two_replicas(tmp_path: Path) -> None:
    env = example_env(tmp_path)  # no database: the arguments are refused before it is read
    result = subprocess.run(
        [sys.executable, "manage.py", "crash_test", "--user", "demo", "--agent", "long", "--deploy", "--replicas", "1"],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1 and "--deploy needs --replicas 2 or more" in result.stderr, result.stderr
