"""The API's CPU per request, in process: each read endpoint beside the plain Django baseline, no server, no client.

On the database ``benchmarks api`` seeded and kept (run it first, without
``--drop``), Django's test client sends the same requests as that benchmark's
figures (same cursors, same queries) to the API and to the baseline
(:mod:`benchmarks.baseline`), the two taking turns for ``--rounds`` rounds;
the figure is this process's CPU time per request (``time.process_time``),
which other load on a shared machine does not inflate as much as it inflates
requests per second. The database's own time is not in it.
"""

from __future__ import annotations

import argparse
import time

from .api import PAGE, USERNAME, Seeded, figures, progress, setup_django
from .report import format_facts, format_value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=50, help="requests per round and side (default 50)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per figure; API and baseline alternate (default 4)")


def seeded_rows() -> tuple[Seeded, object]:
    from django.contrib.auth import get_user_model

    from agent_persistence.models import Conversation, Message

    user = get_user_model().objects.get(username=USERNAME)
    read = Conversation.objects.get(owner=str(user.pk), title="The long one")
    cursors = [str(pk) for pk in Message.objects.filter(conversation=read, position__gte=PAGE).values_list("id", flat=True)[:200]]
    return Seeded("", str(read.pk), cursors), user


def cpu_per_request(client: object, prefix: str, target: object, requests: int) -> float:
    started = time.process_time()
    for _ in range(requests):
        path, query = target()
        response = client.get(f"/{prefix}/{path}", query, HTTP_ACCEPT="application/json")
        assert response.status_code == 200, response.content
    return (time.process_time() - started) / requests


def run(args: argparse.Namespace) -> int:
    setup_django()
    from django.test import Client

    seeded, user = seeded_rows()
    client = Client()
    client.force_login(user)
    lines = []
    for figure, target in figures(seeded).items():
        progress(f"{figure} ...")
        totals = {"api": 0.0, "baseline": 0.0}
        cpu_per_request(client, "api", target, 5)
        cpu_per_request(client, "baseline", target, 5)
        for round_number in range(args.rounds):
            for side in ("api", "baseline") if round_number % 2 == 0 else ("baseline", "api"):
                totals[side] += cpu_per_request(client, side, target, args.requests) / args.rounds
        lines.append((figure, totals["api"] * 1000, totals["baseline"] * 1000))
    print(format_facts([("requests", f"{args.rounds} rounds x {args.requests} per side and figure, Django test client, DEBUG off")]))
    print()
    width = max(len(figure) for figure, _, _ in lines)
    print(f"| {'figure'.ljust(width)} | API CPU ms | baseline CPU ms | baseline/API |")
    print(f"|{'-' * (width + 2)}|-----------:|----------------:|-------------:|")
    for figure, ours, theirs in lines:
        print(f"| {figure.ljust(width)} | {format_value(ours):>10} | {format_value(theirs):>15} | {theirs / ours:>12.2f} |")
    print("\nbaseline/API: the share of the baseline's requests/s a CPU-bound server would keep through the API.")
    return 0
