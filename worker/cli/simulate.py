"""`kefu simulate`: try the agent on simulated buyers before real buyers meet it: scripted
batches, and instances whose buyer a model plays or an operator types."""

from __future__ import annotations

import json
import time
import uuid
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from worker.cli.common import N_, _, cli, console, current_settings, enqueue, operator_errors, outside, print_table
from worker.sample_shop import SAMPLE_ROUTE, SAMPLE_SHOP

if TYPE_CHECKING:  # loaded where used: `kefu --help` loads none of them
    from runtime.store import DeliveryStore
    from transports.simulator import SimulatedPlatform
    from worker.simulation import BatchReport


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
    from transports.simulator.script import load_script
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
        verdict = "PASS" if c.passed else "FAIL"  # a verdict to grep for, as selfcheck's
        rows.append(
            [str(n), c.name, str(c.steps), str(c.replies), _("yes") if c.handed_off else _("no"),
             str(c.result_unknown), first, f"{passed}/{len(c.checks)}", verdict]
        )  # fmt: skip
    columns = ["#", N_("conversation"), N_("steps"), N_("replies"), N_("handoff"), N_("unknown"), N_("first reply s")]
    columns += [N_("checks"), N_("result")]
    print_table(_("simulation batch"), columns, rows, flexible="conversation")
    for n, c in enumerate(report.conversations, 1):
        if c.error:
            console.print(f"{n} {c.name}: {c.error}", markup=False, highlight=False)
        for check in c.checks:
            if not check.passed:
                said = _("{n} {name}: step {step}: expected {expectation}").format(
                    n=n, name=c.name, step=check.step, expectation=check.expectation
                )
                console.print(said, markup=False)
    failed = sum(not c.passed for c in report.conversations)
    console.print(
        _(
            "batch: {conversations} conversations in {seconds}s ({per_minute} per minute),"
            " {passed} passed, {failed} failed"
        ).format(
            conversations=len(report.conversations),
            seconds=f"{report.seconds:.1f}",
            per_minute=f"{report.per_minute:.1f}",
            passed=len(report.conversations) - failed,
            failed=failed,
        ),
        highlight=False,
    )


def _platform_and_store() -> tuple[SimulatedPlatform, DeliveryStore]:
    from runtime.store import DeliveryStore
    from transports.simulator import SimulatedPlatform

    settings = current_settings()
    return SimulatedPlatform(settings.simulator_path), DeliveryStore(settings.delivery_path, settings.delivery)


@simulate_cli.command()
def new(
    persona: Annotated[
        Path | None, typer.Option(help="a text file: who the model plays (a paired instance)", exists=True)
    ] = None,
    manual: Annotated[bool, typer.Option("--manual", help="an empty conversation you type into as the buyer")] = False,
    route: Annotated[str, typer.Option(help="the simulator account's direct route to talk through")] = SAMPLE_ROUTE,
    name: Annotated[str, typer.Option(help="the buyer's display name")] = "模拟顾客",
    start_worker: Annotated[
        bool, typer.Option("--start-worker/--running-worker", help="start a worker for the run, or use running ones")
    ] = True,
) -> None:
    """Create a simulation instance. With --persona, a model (KEFU_SIMULATOR__BUYER__*, else the
    agent's) plays the buyer and the conversation runs until the buyer ends it, its turns run out
    or Ctrl-C stops it; with --manual, print its id for `kefu simulate say`."""
    from worker.simulation_instances import new_instance

    if (persona is None) == (not manual):
        console.print("[red]KEFU_SIMULATION_INVALID: give --persona FILE or --manual[/red]")
        raise typer.Exit(2)
    platform, store = _platform_and_store()
    with operator_errors():
        text = persona.read_text(encoding="utf-8").strip() if persona else None
        instance = new_instance(store, platform, route, name, text)
    console.print(
        _("{id}: {kind} instance on {account} ({conversation})").format(
            id=instance.id, kind=instance.kind, account=instance.account_id, conversation=instance.conversation_id
        ),
        highlight=False,
    )
    if manual:
        console.print(
            _("type as the buyer: {say} · end: {stop}").format(
                say=f"kefu simulate say {instance.id} TEXT", stop=f"kefu simulate stop {instance.id}"
            )
        )
        return
    _run_paired(instance.id, start_worker)


@simulate_cli.command()
def resume(
    instance_id: Annotated[str, typer.Argument(help="a paired instance, e.g. sim-001")],
    start_worker: Annotated[bool, typer.Option("--start-worker/--running-worker")] = True,
) -> None:
    """Go on with a paired instance after a restart, from where its buyer's log stands."""
    _run_paired(instance_id, start_worker)


def _run_paired(instance_id: str, start_worker: bool) -> None:
    from worker.simulation import serving
    from worker.simulation_instances import PairedBuyer, buyer_log_path, buyer_provider, instance_or_fail, stop

    settings = current_settings()
    platform, store = _platform_and_store()
    with operator_errors():
        instance = instance_or_fail(platform, instance_id)
        if instance.kind != "paired" or instance.state != "running":
            console.print(
                f"[red]KEFU_SIMULATION_STOPPED: {instance.id} is a {instance.kind} instance, {instance.state}[/]"
            )
            raise typer.Exit(2)
        buyer = PairedBuyer(
            store,
            platform,
            instance,
            buyer_provider(settings),
            buyer_log_path(settings, instance),
            max_turns=settings.simulator.buyer_max_turns,
            on_line=lambda who, text: console.print(
                outside(
                    f"{instance.buyer_name} ▸ {text}" if who == "buyer" else _("    shop ◂ {text}").format(text=text)
                ),
                soft_wrap=True,
            ),
        )
        env = {"KEFU_DATA_DIR": str(settings.data_dir), "KEFU_BROKER_URL": settings.broker_url}
        log = settings.data_dir / "simulate-worker.log"
        with serving(settings, env, log, console) if start_worker else nullcontext():
            try:
                ended = buyer.run()
            except KeyboardInterrupt:  # the barrier, while the worker still serves the conversation
                ended = stop(store, platform, instance, 60).state.value
    console.print(f"{instance.id}: {ended}", highlight=False)


@simulate_cli.command("say")
def say_command(
    instance_id: Annotated[str, typer.Argument(help="a manual instance, e.g. sim-002")],
    text: Annotated[str, typer.Argument(help="what the buyer says")],
) -> None:
    """Say something as the buyer of a manual instance (the agent under test answers as usual)."""
    from worker.simulation_instances import instance_or_fail, say_as_buyer

    platform = _platform_and_store()[0]
    with operator_errors():
        instance = instance_or_fail(platform, instance_id)
        say_as_buyer(platform, instance, text)
    console.print(outside(f"{instance.buyer_name} ▸ {text}"), highlight=False)


@simulate_cli.command("operator-dm")
def operator_dm_command(
    instance_id: Annotated[str, typer.Argument(help="e.g. sim-002")],
    text: Annotated[str, typer.Argument(help="what you tell the agent under test (the buyer never sees it)")],
    request_id: Annotated[
        str | None, typer.Option(help="a stable id: sending again with it and the same text changes nothing")
    ] = None,
    wait: Annotated[float, typer.Option(min=0, help="seconds to wait for the agent's answer (0: don't wait)")] = 60.0,
) -> None:
    """Speak to the agent under test directly, in its own session: not an IM line, never sent to
    the buyer. Prints the agent's answer (its words to operators) once its turn ends."""
    from runtime.agent.operator_dm import answer_of
    from worker.simulation import POLL_S
    from worker.simulation_instances import instance_or_fail, operator_dm

    settings = current_settings()
    platform, store = _platform_and_store()
    with operator_errors():
        instance = instance_or_fail(platform, instance_id)
        dm = operator_dm(store, platform, instance, text, request_id or f"dm-{uuid.uuid4().hex}")
        from runtime.pipeline import Admit

        queued = enqueue(Admit(dm.customer_id))
        accepted = _("accepted") if dm.created else _("was accepted before")
        console.print(
            _("{id}: message {message} {accepted} (request {request}); {queued}").format(
                id=instance.id, message=dm.message_id, accepted=accepted, request=dm.request_id, queued=queued
            ),
            highlight=False,
        )
        if not wait:
            return
        deadline = time.monotonic() + wait
        while (answer := answer_of(store, settings.sessions_dir, dm)) is None:
            if time.monotonic() > deadline:
                console.print(
                    _("no answer within {seconds}s; it is in the conversation's transcript once it comes").format(
                        seconds=f"{wait:.0f}"
                    )
                )
                raise typer.Exit(1)
            time.sleep(POLL_S)
    if answer.outcome == "revoked":
        console.print(_("a human took the conversation over before the agent answered"))
        return
    for said in answer.texts or [_("(the agent answered with tools only)")]:
        console.print(outside(_("    agent ◂ {text}").format(text=said)), soft_wrap=True)


@simulate_cli.command("stop")
def stop_command(
    instance_id: Annotated[str, typer.Argument(help="e.g. sim-001")],
    timeout: Annotated[float, typer.Option(min=1, help="seconds to wait for the conversation to go quiet")] = 60.0,
) -> None:
    """Stop an instance: no more buyer input or sends from now on; returns once it is quiet.
    Stopping again is harmless; a stopped instance never resumes."""
    from worker.simulation_instances import instance_or_fail, stop

    platform, store = _platform_and_store()
    with operator_errors():
        stopped = stop(store, platform, instance_or_fail(platform, instance_id), timeout)
    console.print(f"{stopped.id}: {stopped.state.value}", highlight=False)


@simulate_cli.command("list")
def list_command(as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts")] = False) -> None:
    """Simulation instances: kind, buyer, state."""
    platform = _platform_and_store()[0]
    instances = platform.instances()
    if as_json:
        print(json.dumps([i.model_dump() | {"id": i.id} for i in instances], ensure_ascii=False))
        return
    rows = [[i.id, i.kind, i.account_id, i.buyer_name, i.conversation_id, i.state.value] for i in instances]
    columns = [N_("id"), N_("kind"), N_("account"), N_("buyer"), N_("conversation"), N_("state")]
    print_table(_("simulation instances"), columns, rows)
