"""`kefu simulate batch`: try the agent on scripted buyers before real buyers meet it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from transports.simulator.script import load_script
from worker.cli.common import cli, console, current_settings, operator_errors, print_table
from worker.simulation import SAMPLE_SHOP, BatchReport

simulate_cli = typer.Typer(no_args_is_help=True, help="Simulated buyers for trying the agent before going live.")
cli.add_typer(simulate_cli, name="simulate")


@simulate_cli.command()
def batch(
    script: Annotated[Path, typer.Argument(help="a .toml or .yaml script (see examples/simulation/)")],
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="conversations at once")] = 2,
    account: Annotated[str, typer.Option(help="the simulator account to talk to (made if missing)")] = SAMPLE_SHOP,
    step_timeout: Annotated[float, typer.Option(min=1, help="seconds a step may wait for its reply")] = 30.0,
    start_worker: Annotated[
        bool, typer.Option("--start-worker/--running-worker", help="start a worker for the run, or use running ones")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts")] = False,
) -> None:
    """Run every conversation of SCRIPT through the real pipeline and report per conversation:
    replies, handoffs, result-unknowns, time to first reply and each expectation. Exit 1 when
    an expectation failed."""
    from worker.simulation import run_script

    settings = current_settings()
    with operator_errors():
        loaded = load_script(script)
        quiet = Console(quiet=True) if as_json else console
        report = run_script(settings, loaded, account, concurrency, step_timeout, start_worker, quiet)
    if as_json:
        dumped = report.model_dump() | {"per_minute": report.per_minute, "passed": report.passed}
        dumped["conversations"] = [
            c.model_dump() | {"passed": c.passed} for c in report.conversations
        ]  # the properties too
        print(json.dumps(dumped, ensure_ascii=False))
    else:
        print_report(report)
    raise typer.Exit(0 if report.passed else 1)


def print_report(report: BatchReport) -> None:
    rows = []
    for n, c in enumerate(report.conversations, 1):
        passed = sum(check.passed for check in c.checks)
        first = f"{c.first_reply_ms / 1000:.1f}" if c.first_reply_ms is not None else "-"
        verdict = "PASS" if c.passed else "FAIL"
        rows.append(
            [str(n), c.name, str(c.steps), str(c.replies), "yes" if c.handed_off else "no", str(c.result_unknown),
             first, f"{passed}/{len(c.checks)}", verdict]
        )  # fmt: skip
    columns = ["#", "conversation", "steps", "replies", "handoff", "unknown", "first reply s", "checks", "result"]
    print_table("simulation batch", columns, rows, flexible="conversation")
    for n, c in enumerate(report.conversations, 1):
        if c.error:
            console.print(f"{n} {c.name}: {c.error}", markup=False, highlight=False)
        for check in c.checks:
            if not check.passed:
                console.print(f"{n} {c.name}: step {check.step}: expected {check.expectation}", markup=False)
    failed = sum(not c.passed for c in report.conversations)
    console.print(
        f"batch: {len(report.conversations)} conversations in {report.seconds:.1f}s"
        f" ({report.per_minute:.1f} per minute), {len(report.conversations) - failed} passed, {failed} failed",
        highlight=False,
    )
