"""``manage.py crash_test`` names what is missing (uvicorn, websockets, ASGI_APPLICATION, the user,
the agent) in one line, with no traceback, before it starts any server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Runs manage.py with some modules made unimportable (sys.modules[name] = None is how Python spells it).
RUNNER = """
import sys
for name in sys.argv[1].split(","):
    if name:
        sys.modules[name] = None
from django.core.management import execute_from_command_line
execute_from_command_line(["manage.py", *sys.argv[2:]])
"""


# The example project with only its own agents: framework bridges import packages (websockets among
# them) that these tests make unimportable.
CRASH_SETTINGS = """
from example_project.settings import *  # noqa: F403

AGENT_PERSISTENCE = {**AGENT_PERSISTENCE, "AGENTS": {  # noqa: F405
    "demo": "example_project.demo.agents.DemoAgent", "long": "example_project.demo.agents.LongAgent"}}
"""


@pytest.fixture(scope="module")
def example_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("crash-errors")
    (folder / "crash_settings.py").write_text(CRASH_SETTINGS)
    env = {**os.environ, "AGENT_PERSISTENCE_VAR_DIR": str(folder), "DJANGO_SETTINGS_MODULE": "crash_settings",
           "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)])}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    # Setup: the system checks run in every crash_test below.
    for command in (["migrate", "-v0", "--skip-checks"], ["demo_user", "--skip-checks"]):
        subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env, check=True, capture_output=True)
    return env


def crash_test(env: dict[str, str], *args: str, block: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", RUNNER, block, "crash_test", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("uvicorn", "CommandError: uvicorn not installed: the crash test serves ASGI_APPLICATION with uvicorn. "
                    "Install with: pip install uvicorn"),
        ("websockets", "CommandError: websockets not installed: the crash test follows the turn with the websockets "
                       "client. Install with: pip install websockets"),
        ("uvicorn,websockets", "CommandError: uvicorn and websockets not installed"),
    ],
)
def test_a_missing_package_is_named(example_env: dict[str, str], block: str, message: str) -> None:
    result = crash_test(example_env, "--user", "demo", "--agent", "long", block=block)
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_asgi_application_is_named(example_env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "no_asgi_settings.py").write_text("from crash_settings import *\nASGI_APPLICATION = None\n")
    env = {**example_env, "DJANGO_SETTINGS_MODULE": "no_asgi_settings", "PYTHONPATH": os.pathsep.join([str(tmp_path), example_env["PYTHONPATH"]])}
    result = crash_test(env, "--user", "demo", "--agent", "long")
    assert result.returncode == 1
    assert "CommandError: settings.ASGI_APPLICATION is not set" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_asgi_application_that_does_not_import_is_named(example_env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "bad_asgi_settings.py").write_text("from crash_settings import *\nASGI_APPLICATION = 'nowhere.asgi.application'\n")
    env = {**example_env, "DJANGO_SETTINGS_MODULE": "bad_asgi_settings", "PYTHONPATH": os.pathsep.join([str(tmp_path), example_env["PYTHONPATH"]])}
    result = crash_test(env, "--user", "demo", "--agent", "long")
    assert result.returncode == 1
    assert "CommandError: settings.ASGI_APPLICATION = 'nowhere.asgi.application' does not import: ModuleNotFoundError" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unknown_user_or_agent_is_named(example_env: dict[str, str]) -> None:
    result = crash_test(example_env, "--user", "nobody", "--agent", "long")
    assert result.returncode == 1
    assert "CommandError: No user 'nobody'" in result.stderr
    result = crash_test(example_env, "--user", "demo", "--agent", "missing")
    assert result.returncode == 1
    assert "CommandError: No agent is registered as 'missing' (AGENT_PERSISTENCE['AGENTS'] has: demo, long)." in result.stderr
    assert "Traceback" not in result.stderr
