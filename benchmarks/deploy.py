"""Rolling deploy: live turns on 3 replicas, each restarted with SIGTERM; lost, duplicated, repeated, stalls.

``python -m benchmarks deploy [--turns 100] [--replicas 3]`` runs the rolling-restart harness
(:mod:`agent_persistence.testing.rolling`, also behind ``manage.py crash_test --deploy``) on
the benchmark database (PostgreSQL, ``DATABASE_URL``'s server) and Redis (``REDIS_URL``,
default ``redis://127.0.0.1:6379/0``): ``--replicas`` uvicorn processes of the example project
(``--lifespan on``, the reaper on, the in-process runner), ``--turns`` turns of the harness's
agent (``--chunks`` chunks ``--delay`` seconds apart, a counted tool call every 25 chunks), each
followed over the websocket from another replica than its producer; once every turn streams,
each replica is SIGTERMed, replaced on its port, and the next goes once the replacement serves.
Prints characters lost and duplicated, tool calls repeated (counted by the tool), model calls
repeated (hand-offs with the model call in flight) and the stall p50/p99 of each hand-off as a
follower saw it (last delta before to first delta after, a reconnect included).

``--runner tasks`` (``TURN_RUNNER = "tasks"``): the replicas (2 by default) only accept and stream;
``--workers`` worker processes of ``--backend`` (``db``: django-tasks-db's ``db_worker`` on the
benchmark database; ``celery``: Celery workers, ``--pool solo``, on the Redis broker
``AP_BENCH_CELERY_BROKER``, default ``REDIS_URL``; Python 3.12+) run the producers, and the workers,
not the replicas, are SIGTERMed and replaced in turn.

The servers keep the library's timings (``DEAD_AFTER`` 3 s, ``HEARTBEAT_INTERVAL`` 1 s) except
``SHUTDOWN_GRACE`` (``--grace``, default 1 s, so the turns outlive it and are handed off) and
``REAPER_INTERVAL`` (irrelevant with Redis: a hand-off is announced and claimed at once).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path

from .runtime import ensure_database, progress

ROOT = Path(__file__).resolve().parent.parent
USERS = 5  # turns spread over users: a server keeps WEBSOCKET_MAX_PER_USER sockets per user


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--turns", type=int, default=100, help="live turns during the deploy (default 100)")
    parser.add_argument("--replicas", type=int, default=None,
                        help="server processes, each restarted once (default 3; with --runner tasks 2, not restarted)")
    parser.add_argument("--runner", choices=("inprocess", "tasks"), default="inprocess",
                        help="TURN_RUNNER: producers in the replicas (default), or on a worker tier restarted in turn")
    parser.add_argument("--backend", choices=("db", "celery"), default="db",
                        help="the worker tier's task backend: django-tasks-db's db_worker (default) or Celery (Python 3.12+)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes with --runner tasks (default 2)")
    parser.add_argument("--grace", type=float, default=1.0, help="SHUTDOWN_GRACE of the servers (default 1 s)")
    parser.add_argument("--chunks", type=int, default=300, help="chunks of each answer (default 300)")
    parser.add_argument("--delay", type=float, default=0.1, help="seconds between two chunks: the model (default 0.1)")
    parser.add_argument("--keep-logs", type=Path, default=None, metavar="DIR",
                        help="copy the replicas' logs (stderr) into DIR at the end")


def run(args: argparse.Namespace) -> int:
    from .database import BENCH_DATABASE_ENV, FULL_DATABASE

    tasks = args.runner == "tasks"
    replicas = args.replicas if args.replicas is not None else 2 if tasks else 3
    if replicas < 2 or args.turns < 1 or (tasks and args.workers < 2):
        raise SystemExit("--replicas and --workers must be 2 or more and --turns 1 or more")
    if tasks and args.backend == "celery" and sys.version_info < (3, 12):
        raise SystemExit("--backend celery needs Python 3.12 or newer (django-tasks-celery)")
    redis_url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    os.environ["REDIS_URL"] = redis_url  # the example project's settings choose the Redis layer from it
    if tasks:  # benchmarks/settings.py configures the tier from these (here too: migrate makes the db backend's table)
        os.environ["AP_BENCH_TASKS"] = args.backend
        os.environ.setdefault("AP_BENCH_CELERY_BROKER", redis_url)
    ensure_database(FULL_DATABASE)

    from django.contrib.auth import get_user_model

    from agent_persistence.testing.rolling import CHUNKS_ENV, DELAY_ENV, TOOL_LOG_ENV, ReplicaSpec, run_rolling_restart

    usernames = [f"deploy-bench-{number}" for number in range(USERS)]
    for username in usernames:
        get_user_model().objects.get_or_create(username=username)
    with tempfile.TemporaryDirectory(prefix="agent_persistence_deploy_") as directory:
        tool_log = Path(directory) / "tools.log"
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "benchmarks.settings", BENCH_DATABASE_ENV: FULL_DATABASE,
               "REDIS_URL": redis_url, TOOL_LOG_ENV: str(tool_log), CHUNKS_ENV: str(args.chunks), DELAY_ENV: str(args.delay)}
        spec = ReplicaSpec(app="example_project.asgi.application", env=env, log_dir=Path(directory), overrides={
            "AGENTS": {"rolling": "agent_persistence.testing.rolling.RollingAgent"},
            "SHUTDOWN_GRACE": args.grace, "REAPER_ENABLED": True, "REAPER_INTERVAL": 1.0,
        })
        tier = f", {args.workers} {args.backend} workers" if tasks else ""
        progress(f"deploy: {args.turns} turns of {args.chunks} chunks every {args.delay:g} s on {replicas} replicas{tier} "
                 f"(PostgreSQL {FULL_DATABASE}, Redis {redis_url}), SHUTDOWN_GRACE {args.grace:g} s")
        report = asyncio.run(run_rolling_restart(
            spec, usernames=usernames, agent="rolling", turns=args.turns, replicas=replicas,
            restart_after_chars=100, timeout=args.chunks * args.delay * 3 + 120, tool_log=tool_log, progress=progress,
            workers=args.workers if tasks else 0, backend=args.backend, celery_app="benchmarks.celery_app",
        ))
        if not report.passed:
            for path in Path(directory).glob("agent_persistence_rolling_*.log"):
                print(path.read_text()[-2000:])
        if args.keep_logs is not None:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            for path in Path(directory).glob("agent_persistence_rolling_*.log"):
                shutil.copy(path, args.keep_logs / path.name)
    runner = f"--runner tasks --backend {args.backend} --workers {args.workers}" if tasks else "(in-process runner)"
    print(f"\n`python -m benchmarks deploy --turns {args.turns} --replicas {replicas}` {runner}:")
    print("\n".join(report.lines()))
    return 0 if report.passed else 1
