"""``python -m benchmarks <name>``: run one benchmark and print its figures."""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

from . import (
    activities,
    api,
    api_cpu,
    checkpoints,
    deploy,
    idle_sockets,
    langgraph_saver,
    pages,
    runtime,
    storage,
    streaming,
    transcripts,
)

BENCHMARKS: dict[str, ModuleType] = {
    "storage": storage,
    "turns": runtime,
    "checkpoints": checkpoints,
    "langgraph-saver": langgraph_saver,
    "streaming": streaming,
    "api": api,
    "idle_sockets": idle_sockets,
    "transcripts": transcripts,
    "activities": activities,
    "pages": pages,
    "api-cpu": api_cpu,
    "deploy": deploy,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    subcommands = parser.add_subparsers(dest="benchmark", required=True, metavar="benchmark")
    for name, module in BENCHMARKS.items():
        storage_parser = subcommands.add_parser(name, help=(module.__doc__ or "").splitlines()[0])
        module.add_arguments(storage_parser)
    args = parser.parse_args(argv)
    return BENCHMARKS[args.benchmark].run(args)


if __name__ == "__main__":
    sys.exit(main())
