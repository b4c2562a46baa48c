"""`python -m bench.faults SCENARIO …`: see the package docstring (`--help` prints it)."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from rich.console import Console

import bench.faults as faults
from bench.faults.options import SCENARIOS, SHARDED, options_for
from bench.faults.report import render


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.faults", description=faults.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("scenario", choices=SCENARIOS)
    parser.add_argument("--messages", type=int, help="buyer messages to offer")
    parser.add_argument("--kills", type=int, help="faults of the scenario's kind (kills, redis kills, damaged logs)")
    parser.add_argument("--seed", type=int, default=1, help="seeds the fault schedule and the workload")
    parser.add_argument("--direct", action="store_true", help="no listener: the driver publishes every page")
    parser.add_argument("--rate", type=float, help="messages per second")
    parser.add_argument("--buyers", type=int, help="simulated buyers")
    parser.add_argument("--settle", type=float, dest="settle_s", help="bound (s) on waiting for quiet at the end")
    parser.add_argument("--short", action="store_true", help="the short form (what the integration tests run)")
    parser.add_argument("--dir", type=Path, dest="workdir", help="keep the run in this folder")
    parser.add_argument("--keep", action="store_true", help="keep the run folder even when the run passes")
    parser.add_argument("--json", type=Path, help="also write the report as JSON here")
    parser.add_argument("--shards", type=int, default=1, choices=(1, 2), help="shards, one account each (default 1)")
    parser.add_argument(
        "--network-model",
        action="store_true",
        help="the agent is a fake network model and the workers run the pool kefu picks for it (a thread pool)",
    )
    args = parser.parse_args(argv)
    if args.shards > 1 and args.scenario not in SHARDED:
        parser.error(f"--shards 2 runs with {', '.join(SHARDED)}")
    if args.network_model and args.scenario not in SHARDED:
        parser.error(f"--network-model runs with {', '.join(SHARDED)}")
    return args


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through the rig, which stops every process it started


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for signum in (signal.SIGINT, signal.SIGTERM):  # also when started with SIGINT ignored (`&`)
        signal.signal(signum, _terminate)
    options = options_for(
        args.scenario,
        short=args.short,
        seed=args.seed,
        direct=args.direct,
        messages=args.messages,
        kills=args.kills,
        rate=args.rate,
        buyers=args.buyers,
        settle_s=args.settle_s,
        workdir=args.workdir,
        keep=args.keep,
        shards=args.shards,
        network_model=args.network_model,
    )
    console = Console(width=None if sys.stdout.isatty() else 132)
    progress = Console(stderr=True)
    began = time.monotonic()

    def say(line: str) -> None:
        progress.print(f"[dim]faults {time.monotonic() - began:6.1f}s · {line}[/dim]", soft_wrap=True, highlight=False)

    try:
        report = faults.run(options, say)
    except KeyboardInterrupt:
        say("interrupted; every process was stopped")
        return 130
    render(report, console)
    if args.json:
        report.write_json(args.json)
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
