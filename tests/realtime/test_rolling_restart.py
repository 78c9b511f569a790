"""A rolling deploy loses nothing: three replicas, live turns, each replica restarted in turn with SIGTERM.

Three real uvicorn processes (lifespan on, the reaper on, ``SHUTDOWN_GRACE`` short) on
PostgreSQL and Redis (:mod:`agent_persistence.testing.rolling`, the harness of ``manage.py
crash_test --deploy`` and ``python -m benchmarks deploy``). Turns of the harness's agent stream
on every replica, each followed over the websocket from another replica; every replica gets
SIGTERM in turn, and a replacement starts on its port before the next one goes. Every follower
gets its whole answer, each character once; the agent's tool, which counts its own executions,
ran once per call; every turn ended ``completed``; every turn still live at a SIGTERM was handed
off (none taken over as dead after ``DEAD_AFTER``); and the stall of each hand-off a follower saw
(last delta before to first after, a reconnect included) has a median and a p99 under the bounds
:data:`STALL_P50` and :data:`STALL_P99` (below a crash takeover; the 1 s target is the benchmark's).

PostgreSQL + Redis only: on SQLite four processes (three servers and the test) share one file,
and without Redis a follower on another replica reads the recording: ``tests/test_crash_command.py``
covers that path with ``crash_test --deploy`` on the embedded default.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent_persistence.testing.rolling import (
    CHUNKS_ENV,
    DELAY_ENV,
    TOOL_LOG_ENV,
    ReplicaSpec,
    percentile,
    run_rolling_restart,
)
from tests.realtime.servers import server_env

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(150),
    pytest.mark.skipif(
        not os.environ.get("DATABASE_URL", "").startswith("postgres"),
        reason="the rolling restart runs with the PostgreSQL suite (DATABASE_URL=postgres://...) and Redis",
    ),
]

TURNS = 24
USERS = 4
CHUNKS, DELAY = 100, 0.2  # 20 s of answer each (a restart takes 3-8 s here), 120 deltas/s in all
#: The target is a p99 under 1 s. Measured here (the shared 2-core machine at a load of 3-7, three servers
#: restarting beside 24 streaming turns, the library's timings): median 0.7-1.1 s, p99 1.2-2.5 s (benchmarks/README.md, "Rolling
#: deploys"): each replica's hand-off writes and its survivors' claims queue on the process's one thread for
#: database work. CI runs this beside another leg on a 2-core machine, so the bounds are generous: a median
#: under 2.5 s, a p99 under 5 s. What tells a hand-off from a crash takeover is not the stall bound but
#: ``turns_lost == 0`` below: no turn waited for DEAD_AFTER and was taken over as dead.
STALL_P50 = 2.5
STALL_P99 = 5.0


def test_a_rolling_restart_of_three_replicas_loses_duplicates_and_repeats_nothing(tmp_path: Path) -> None:
    import asyncio

    from django.contrib.auth import get_user_model
    from django.db import connection

    if not os.environ.get("REDIS_URL"):
        pytest.fail("REDIS_URL is not set: the rolling restart runs on PostgreSQL and Redis.")
    usernames = [f"rolling-{number}" for number in range(USERS)]
    for username in usernames:
        get_user_model().objects.create_user(username)
    tool_log = tmp_path / "tools.log"
    env = {**server_env(str(connection.settings_dict["NAME"]), redis=True),
           TOOL_LOG_ENV: str(tool_log), CHUNKS_ENV: str(CHUNKS), DELAY_ENV: str(DELAY)}
    # The library's timings, as a deploy has them (DEAD_AFTER 3 s, a recording flush every 0.5 s), not the
    # crash tests' fast ones: those write five times as often, and the hand-offs' writes queue behind them.
    env.pop("AP_FAST_TIMINGS", None)
    spec = ReplicaSpec(
        app="tests.realtime.asgi.application", env=env, log_dir=tmp_path,
        overrides={"AGENTS": {"rolling": "agent_persistence.testing.rolling.RollingAgent"},
                   "SHUTDOWN_GRACE": 0.3, "REAPER_ENABLED": True, "REAPER_INTERVAL": 0.25},
    )
    report = asyncio.run(run_rolling_restart(spec, usernames=usernames, agent="rolling", turns=TURNS,
                                             tool_log=tool_log, timeout=120, progress=print))
    print("\n" + "\n".join(report.lines()))
    logs = "\n".join(path.read_text()[-3000:] for path in tmp_path.glob("*.log") if path != tool_log)

    assert report.restarts == 3 and report.unfinished == 0, logs
    assert report.stop_reasons == {"completed": TURNS}, (report.stop_reasons, report.notes, logs)
    assert (report.lost, report.duplicated) == (0, 0), report.notes
    assert report.tool_executions == report.tool_calls == TURNS * ((CHUNKS - 1) // 25), report.lines()
    assert report.tool_calls_repeated == 0
    # Every restart found turns streaming: each handed its turns off; none was taken over as dead.
    assert report.handed_off >= 3 and report.turns_lost == 0, report.lines()
    assert len(report.stalls) >= report.handed_off // 2, report.lines()  # followers saw the changes of producer
    assert report.model_calls_repeated <= report.handed_off
    stalls = [stall.seconds for stall in report.stalls]
    assert percentile(stalls, 0.5) < STALL_P50 and percentile(stalls, 0.99) < STALL_P99, report.lines()
    assert report.passed, report.notes
