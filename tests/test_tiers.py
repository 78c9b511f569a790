"""The suite's tiers (tests/conftest.py): every test gets exactly one, and the rules find each kind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: One test of each kind the rules tell apart, and the tier it must get.
EXPECTED = {
    # By folder.
    "tests/faults/test_row_lock.py": "e2e",
    # By the helper its fixture calls (start_servers), in a file of in-process tests.
    "tests/test_takeover.py::test_after_a_takeover_every_frame_and_the_stream_status_name_the_resumed_run": "e2e",
    # By the helper imported inside the test function (tests.api.live.live_server).
    "tests/api/test_hostile_input.py::test_on_a_live_server_hostile_bodies_get_json_errors_never_an_empty_body": "e2e",
    # By a producer process started from a string (python -m tests.turn_process).
    "tests/test_crash.py": "e2e",
    # The database, in this process.
    "tests/test_turn_races.py::test_turn_endpoints_work_under_atomic_requests": "integration",
    # Neither.
    "tests/test_times.py::test_none_is_not_given": "unit",
}


def collected(tier: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", tier, *EXPECTED],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode in (0, 5), result.stdout + result.stderr
    return {line for line in result.stdout.splitlines() if "::" in line}


def test_each_kind_of_test_gets_its_tier_and_no_other() -> None:
    by_tier = {tier: collected(tier) for tier in ("unit", "integration", "e2e")}
    for node, tier in EXPECTED.items():
        matching = [t for t, nodes in by_tier.items() if any(n == node or n.startswith((f"{node}::", f"{node}[")) for n in nodes)]
        assert matching == [tier], (node, matching)
    every = set().union(*by_tier.values())
    assert sum(len(nodes) for nodes in by_tier.values()) == len(every)  # no test in two tiers


def test_a_test_marked_with_the_wrong_tier_is_a_usage_error() -> None:
    # The probe lives in a hidden folder of tests/ (pytest never recurses into one), named for this
    # process, so other runs sharing the checkout (CI's legs run side by side) neither collect it
    # nor remove it under this one.
    folder = ROOT / "tests" / f".tier_probe_{os.getpid()}_{uuid.uuid4().hex}"
    folder.mkdir()
    module = folder / f"test_tier_probe_{os.getpid()}.py"
    module.write_text("import pytest\n\n\n@pytest.mark.integration\ndef test_probe():\n    pass\n")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", str(module.relative_to(ROOT))],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert result.returncode != 0
    assert "is marked integration but is a unit test" in result.stdout + result.stderr


@pytest.mark.parametrize("tier", ["unit", "integration", "e2e"])
def test_the_tier_markers_are_registered(pytestconfig: pytest.Config, tier: str) -> None:
    assert any(line.startswith(f"{tier}:") for line in pytestconfig.getini("markers"))
