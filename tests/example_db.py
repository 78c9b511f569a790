"""The example project's SQLite database, migrated and with the demo user, made once per test process.

Migrating the example project and creating its demo user costs two ``manage.py`` processes, each
of which imports every agent framework for the system checks (several seconds of CPU); the tests
that serve the example project on the embedded default need that database, not the making of
it (``make demo``'s own test, the fresh project and the erasure commands' test still run the
commands, and ``tests/test_checks.py`` the checks). :func:`copy_example_db` copies a template made
on first use, per settings module, into the ``AGENT_PERSISTENCE_VAR_DIR`` a test gives; its two
commands skip the system checks (about 3 s of CPU each, the agent frameworks' imports), which the
tests that serve the template are not about.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATABASE = "db.sqlite3"

_templates: dict[str, Path] = {}
_lock = threading.Lock()


def example_env(var_dir: Path, settings_module: str = "example_project.settings", **extra_env: str) -> dict[str, str]:
    """The environment of an example-project process on the embedded default (SQLite, in-memory layer) in ``var_dir``."""
    env = {**os.environ, "AGENT_PERSISTENCE_VAR_DIR": str(var_dir), "DJANGO_SETTINGS_MODULE": settings_module, **extra_env}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    return env


def _template(settings_module: str, extra_env: dict[str, str]) -> Path:
    with _lock:
        if settings_module not in _templates:
            folder = Path(tempfile.mkdtemp(prefix="ap-example-db-"))
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            env = example_env(folder, settings_module, **extra_env)
            for command in (["migrate", "-v0", "--skip-checks"], ["demo_user", "--skip-checks"]):
                subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env, check=True, capture_output=True)
            # The commands have exited: SQLite checkpointed the WAL into the database file.
            assert not (folder / f"{DATABASE}-wal").exists() or (folder / f"{DATABASE}-wal").stat().st_size == 0
            _templates[settings_module] = folder / DATABASE
        return _templates[settings_module]


def copy_example_db(var_dir: Path, settings_module: str = "example_project.settings", **extra_env: str) -> None:
    """Put a migrated example database with the demo user (demo / demo) in ``var_dir``.

    ``extra_env``: what ``settings_module`` needs to import (a browser page's bundle), for the first
    use's ``manage.py`` runs.
    """
    var_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_template(settings_module, extra_env), var_dir / DATABASE)
