"""Throwaway database servers a fault-injection test may stop, restart and lock: never the machine's own.

:class:`PrivatePostgres` runs ``initdb`` and ``pg_ctl`` from the directory
``pg_config --bindir`` prints, as the ``postgres`` user when run as root, on a
free loopback port, in a temporary folder that :meth:`destroy` removes::

    with PrivatePostgres() as server:
        server.create_database("faults")
        url = server.url("faults")
        server.stop(); server.start()
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from .network import free_port


def postgres_bindir() -> Path:
    return Path(subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip())


class PrivatePostgres:
    """A PostgreSQL cluster of the test's own, on a free port (trust authentication, user ``postgres``)."""

    def __init__(self) -> None:
        self.bindir = postgres_bindir()
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="agent_persistence_pg_"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.user = self._run_as()
        if self.user:
            record = pwd.getpwnam(self.user)
            os.chown(self.root, record.pw_uid, record.pw_gid)
        self._pg("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    @staticmethod
    def _run_as() -> str | None:
        # initdb refuses to run as root: take the postgres user the server packages create.
        if os.geteuid() != 0:
            return None
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise RuntimeError("Running as root needs a 'postgres' user to run a private PostgreSQL.") from None
        return "postgres"

    def _pg(self, program: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [str(self.bindir / program), *args]
        if self.user:
            command = ["runuser", "-u", self.user, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, check=check, timeout=120)

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off -c max_connections=200"
        self._pg("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop", check=False)

    def running(self) -> bool:
        return self._pg("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str = "postgres", **options: Any) -> Any:
        import psycopg

        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=database, **options)

    def create_database(self, name: str) -> None:
        with self.connect(autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')

    def commits(self, database: str) -> int:
        """Transactions committed in ``database`` so far (``pg_stat_database.xact_commit``)."""
        with self.connect(database, autocommit=True) as connection:
            connection.execute("SELECT pg_stat_clear_snapshot()")
            row = connection.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [database]).fetchone()
            return int(row[0])

    def wait_accepting(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._pg("pg_isready", "-h", "127.0.0.1", "-p", str(self.port), check=False).returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"the private PostgreSQL did not start: {self.log.read_text()[-2000:]}")

    def destroy(self) -> None:
        if self.data.exists():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "PrivatePostgres":
        self.start()
        self.wait_accepting()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.destroy()
