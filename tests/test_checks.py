"""System checks through ``manage.py check`` as a user runs it: E004 without ``--database``, and the
deployment warnings W101-W104 of ``check --deploy``.

The command-line tests run ``manage.py check`` in a real subprocess, on the example project (its
defaults are the development settings the deploy checks exist for) or on a minimal settings file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.test import override_settings

from agent_persistence.checks import check_deployment, sqlite_without_immediate

ROOT = Path(__file__).resolve().parent.parent
DEPLOY_IDS = ("agent_persistence.W101", "agent_persistence.W102", "agent_persistence.W103", "agent_persistence.W104")

MINIMAL_SETTINGS = """
SECRET_KEY = "checks-test"
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "rest_framework", "channels", "agent_persistence"]
DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": {name!r}, "OPTIONS": {options!r}}}}}
AGENT_PERSISTENCE = {{"ENCRYPTION_KEYS": [{key!r}]}}
USE_TZ = True
"""


def manage(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "django", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def settings_env(tmp_path: Path, options: dict[str, object]) -> dict[str, str]:
    (tmp_path / "check_settings.py").write_text(
        MINIMAL_SETTINGS.format(name=str(tmp_path / "db.sqlite3"), options=options, key=Fernet.generate_key().decode())
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "check_settings", "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    env.pop("DATABASE_URL", None)
    return env


def test_plain_check_reports_e004_for_sqlite_without_immediate_transactions(tmp_path: Path) -> None:
    result = manage("check", env=settings_env(tmp_path, {}), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "agent_persistence.E004" in result.stderr
    assert "Database 'default' is SQLite without OPTIONS['transaction_mode'] = 'IMMEDIATE'." in result.stderr
    assert "Traceback" not in result.stderr


def test_plain_check_passes_with_immediate_transactions(tmp_path: Path) -> None:
    result = manage("check", env=settings_env(tmp_path, {"transaction_mode": "IMMEDIATE"}), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "agent_persistence.E004" not in result.stdout + result.stderr


def test_e004_is_reported_once_with_database_too(tmp_path: Path) -> None:
    result = manage("check", "--database", "default", env=settings_env(tmp_path, {"timeout": 30}), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.count("agent_persistence.E004") == 1, result.stderr


def test_e004_only_for_sqlite_entries_without_immediate() -> None:
    databases = {
        "plain": {"ENGINE": "django.db.backends.sqlite3", "NAME": "x.sqlite3"},
        "deferred": {"ENGINE": "django.db.backends.sqlite3", "OPTIONS": {"transaction_mode": "DEFERRED"}},
        "immediate": {"ENGINE": "django.db.backends.sqlite3", "OPTIONS": {"transaction_mode": "IMMEDIATE"}},
        "postgres": {"ENGINE": "django.db.backends.postgresql", "NAME": "x"},
        "broken": {"ENGINE": "no.such.backend"},
    }
    errors = sqlite_without_immediate(databases)
    assert [error.id for error in errors] == ["agent_persistence.E004"] * 2
    assert ["'plain'" in errors[0].msg, "'deferred'" in errors[1].msg] == [True, True]


def example_env(**overrides: str) -> dict[str, str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "example_project.settings"}
    for name in ("DATABASE_URL", "REDIS_URL", "AGENT_PERSISTENCE_KEY", "DJANGO_SECRET_KEY", "DJANGO_DEBUG"):
        env.pop(name, None)
    return {**env, **overrides}


def test_check_deploy_warns_about_the_example_projects_development_settings(tmp_path: Path) -> None:
    result = manage("check", "--deploy", env=example_env(AGENT_PERSISTENCE_VAR_DIR=str(tmp_path)))
    assert result.returncode == 0, result.stderr  # warnings only
    for check_id in DEPLOY_IDS:
        assert check_id in result.stderr, check_id
    assert "ENCRYPTION_KEYS[0], SECRET_KEY: a development key published in this repository" in result.stderr


def test_plain_check_runs_no_deploy_checks(tmp_path: Path) -> None:
    result = manage("check", env=example_env(AGENT_PERSISTENCE_VAR_DIR=str(tmp_path)))
    assert result.returncode == 0, result.stderr
    assert not [check_id for check_id in DEPLOY_IDS if check_id in result.stdout + result.stderr]


def test_check_deploy_is_quiet_on_a_production_configuration(tmp_path: Path) -> None:
    env = example_env(
        AGENT_PERSISTENCE_VAR_DIR=str(tmp_path),
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/postgres",  # check --deploy does not connect
        REDIS_URL="redis://127.0.0.1:6379/4",
        AGENT_PERSISTENCE_KEY=Fernet.generate_key().decode(),
        DJANGO_SECRET_KEY=Fernet.generate_key().decode() + Fernet.generate_key().decode(),
        DJANGO_DEBUG="0",
    )
    result = manage("check", "--deploy", env=env)
    assert result.returncode == 0, result.stderr
    assert not [check_id for check_id in DEPLOY_IDS if check_id in result.stdout + result.stderr], result.stderr


def ids(messages: list[object]) -> list[str]:
    return [message.id for message in messages]  # type: ignore[attr-defined]


REDIS_LAYER = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": ["redis://127.0.0.1:6379/4"]}}}


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"DEBUG": True}, "agent_persistence.W104"),
        ({"CHANNEL_LAYERS": {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}}, "agent_persistence.W102"),
        ({"SECRET_KEY": "example-project-insecure-development-key"}, "agent_persistence.W103"),
        ({"AGENT_PERSISTENCE": {"ENCRYPTION_KEYS": [Fernet.generate_key().decode(), "3q1q0V5zq4yJq8mJ9cY2o3lX6pQJb2b5m5t0Yk8n1dE="]}},
         "agent_persistence.W103"),
    ],
)
def test_each_deploy_warning_has_its_own_cause(overrides: dict[str, object], expected: str) -> None:
    clean = {
        "DEBUG": False,
        "CHANNEL_LAYERS": REDIS_LAYER,
        "SECRET_KEY": "a-long-random-production-secret-key-nobody-published-0123456789",
        "AGENT_PERSISTENCE": {"ENCRYPTION_KEYS": [Fernet.generate_key().decode()]},
    }
    sqlite = ["agent_persistence.W101"] if check_deployment_sqlite() else []
    with override_settings(**clean):
        assert ids(check_deployment()) == sqlite
    with override_settings(**{**clean, **overrides}):
        assert ids(check_deployment()) == sorted([*sqlite, expected])


def check_deployment_sqlite() -> bool:
    from django.db import connection

    return connection.vendor == "sqlite"


def test_w101_names_the_sqlite_database_and_only_on_sqlite() -> None:
    from django.db import connection

    with override_settings(DEBUG=False, CHANNEL_LAYERS=REDIS_LAYER, SECRET_KEY="x" * 60):
        found = [message for message in check_deployment() if message.id == "agent_persistence.W101"]
    if connection.vendor == "sqlite":
        assert len(found) == 1 and "Database 'default' is SQLite" in found[0].msg
    else:
        assert found == []


@pytest.mark.parametrize(
    ("tasks", "warned"),
    [
        (None, True),  # no TASKS: the backport's default, the immediate backend
        ({"default": {"BACKEND": "django_tasks.backends.immediate.ImmediateBackend"}}, True),
        ({"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}}, True),
        ({"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}, False),
        ({"default": {"BACKEND": "django_tasks_celery.CeleryBackend"}}, False),
    ],
)
def test_w105_turn_runner_tasks_needs_a_task_backend_that_a_worker_runs(tasks: dict[str, object] | None, warned: bool) -> None:
    from agent_persistence.checks import check_turn_runner

    overrides: dict[str, object] = {"AGENT_PERSISTENCE": {"TURN_RUNNER": "tasks"}}
    if tasks is not None:
        overrides["TASKS"] = tasks
    with override_settings(**overrides):
        found = check_turn_runner()
        assert ids(found) == (["agent_persistence.W105"] if warned else [])
        assert not warned or 'TURN_RUNNER is "tasks"' in found[0].msg
        if tasks is None:  # Django 6's global default is the immediate backend; the backport has none
            assert "no TASKS backend is configured" in found[0].msg or "ImmediateBackend" in found[0].msg
    with override_settings(**{**overrides, "AGENT_PERSISTENCE": {"TURN_RUNNER": "inprocess"}}):
        assert check_turn_runner() == []  # in-process producers need no task backend


def test_turn_runner_is_inprocess_or_tasks() -> None:
    from agent_persistence.checks import check_settings

    with override_settings(AGENT_PERSISTENCE={"TURN_RUNNER": "celery"}):
        errors = [message for message in check_settings() if "TURN_RUNNER" in message.msg]
    assert ids(errors) == ["agent_persistence.E003"] and 'must be "inprocess" or "tasks"' in errors[0].msg
