"""The `kefu` command: the demo, and an operator's views and actions on a data dir."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from config import Settings
from runtime.errors import KefuError
from runtime.manual import query_manual
from runtime.media import read_media_file
from runtime.store import DeliveryStore
from worker.celery_app import app

cli = typer.Typer(add_completion=False, no_args_is_help=True, help="kefu: IM customer-service worker.")
console = Console()


def _settings() -> Settings:
    """Validated when the worker package loads: a bad value has already stopped the process."""
    return app.kefu_settings  # type: ignore[attr-defined]


def _flatten(prefix: str, value: Any) -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [item for key, inner in value.items() for item in _flatten(f"{prefix}__{key.upper()}", inner)]
    return [(prefix, "" if value is None else str(value))]


@cli.command()
def config() -> None:
    """Print the effective settings (secrets masked)."""
    settings = _settings()
    table = Table("variable", "value", title="effective kefu settings")
    dumped = json.loads(settings.model_dump_json())  # SecretStr dumps as '**********'
    for key, value in dumped.items():
        for name, shown in _flatten(f"KEFU_{key.upper()}", value):
            table.add_row(name, shown)
    console.print(table)


def _store() -> DeliveryStore:
    from worker.context import runtime_for

    settings = _settings()
    if not settings.delivery_path.exists():
        console.print(f"no delivery store at {settings.delivery_path} yet (nothing has run with this data dir)")
        raise typer.Exit(1)
    return runtime_for(app).store


@contextmanager
def _operator_errors() -> Iterator[None]:
    """A KefuError is the operator's answer: print it and exit 2, no traceback."""
    try:
        yield
    except KefuError as error:
        console.print(f"[red]kefu: {error}[/red]", soft_wrap=True)
        raise typer.Exit(2) from None


def _shop_time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=_settings().zone).strftime("%Y-%m-%d %H:%M:%S")


def _print_rows(rows: list[BaseModel], as_json: bool, title: str, columns: list[str]) -> None:
    if as_json:
        print(json.dumps([row.model_dump() for row in rows], ensure_ascii=False))
        return
    table = Table(*columns, title=title)
    for row in rows:
        values = row.model_dump()
        table.add_row(*(_shop_time(values[c]) if c.endswith("_at") else str(values[c]) for c in columns))
    console.print(table, soft_wrap=True)


@cli.command()
def status() -> None:
    """Per-stage counts read from the delivery store."""
    from runtime.status import stage_counts

    settings = _settings()
    store = _store()
    table = Table("stage", "state", "count", title=f"kefu status · shard {settings.shard}")
    for stage in stage_counts(store):
        for state, count in sorted(stage.counts.items()) or [("-", 0)]:
            table.add_row(stage.stage, state, str(count))
    console.print(table)
    console.print(_checkpoint_table(None), soft_wrap=True)


def _checkpoint_table(account: str | None) -> Table:
    from runtime.checkpoints import checkpoint_views

    table = Table(
        "account",
        "generation",
        "pending",
        "input",
        "outbox",
        "turns",
        "reception",
        "last reported",
        "reporting",
        title="checkpoints",
    )
    with _operator_errors():
        views = checkpoint_views(_store(), account)
    for view in views:
        report = view.report
        reporting = "stopped (lease rejected)" if view.stopped else view.failure_class or "ok"
        table.add_row(
            report.account_id,
            str(report.generation),
            str(report.pending_count),
            str(report.pending.input),
            str(report.pending.outbox),
            str(report.pending.turns),
            report.reception,
            _shop_time(view.last_reported_at) if view.last_reported_at else "never",
            reporting,
        )
    return table


@cli.command()
def checkpoint(
    account: Annotated[str | None, typer.Option(help="only this account")] = None,
    resume: Annotated[
        str | None, typer.Option(help="start a new lease generation for this account after the sink rejected one")
    ] = None,
) -> None:
    """Each account's checkpoint as of now (cursors are never shown), and how reporting goes."""
    from runtime.checkpoints import resume_checkpoint

    if resume is not None:
        with _operator_errors():
            generation = resume_checkpoint(_store(), resume)
        console.print(f"checkpoint {resume}: reporting resumes under generation {generation}")
    console.print(_checkpoint_table(account), soft_wrap=True)


@cli.command()
def customers(
    search: Annotated[str | None, typer.Option(help="literal substring of title, conversation or sender name")] = None,
    account: Annotated[str | None, typer.Option(help="only this account")] = None,
    source: Annotated[str, typer.Option(help="real or simulation (they never mix)")] = "real",
    reader: Annotated[str, typer.Option(help="whose unread counts (see `kefu read`)")] = "operator",
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts")] = False,
) -> None:
    """Customers (conversations), most recently active first."""
    from runtime.customers import list_customers

    if source not in ("real", "simulation"):
        console.print(f"[red]kefu: --source must be real or simulation, not {source!r}[/red]")
        raise typer.Exit(2)
    rows = list_customers(_store(), source=source, account_id=account, search=search, reader=reader)  # type: ignore[arg-type]
    columns = ["id", "account_id", "conversation_id", "unread", "handling_paused", "last_activity_at"]
    _print_rows(rows, as_json, f"{source} customers", columns)  # type: ignore[arg-type]


@cli.command()
def history(
    customer_id: int,
    limit: Annotated[int, typer.Option(min=1, max=500, help="messages per page")] = 50,
    before: Annotated[int | None, typer.Option(help="page further back: the value the last page printed")] = None,
) -> None:
    """A customer's messages as labelled lines, oldest first (the same view the agent gets)."""
    from runtime.handling import handling_state
    from runtime.history import query_history

    store = _store()
    with _operator_errors():
        handling_state(store, customer_id)  # an unknown customer is an error, not an empty page
    with store.read() as conn:
        page = query_history(conn, customer_id, limit, before, _settings().zone)
    for line in page.lines:
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    if page.next_before is not None:
        console.print(f"(older: kefu history {customer_id} --before {page.next_before})")


outbox_cli = typer.Typer(help="Outbox requests: list them, query one, settle or retry result-unknown ones.")
cli.add_typer(outbox_cli, name="outbox")


@outbox_cli.callback(invoke_without_command=True)
def outbox(
    ctx: typer.Context,
    state: Annotated[
        str | None,
        typer.Option(help="pending, sending, sent, failed, result-unknown, revoked, route-changed or skipped"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts")] = False,
) -> None:
    """List outbox requests, most recently changed first."""
    from runtime.outbox import list_requests

    if ctx.invoked_subcommand is None:
        columns = ["request_id", "customer_id", "origin", "state", "error_code", "updated_at"]
        _print_rows(list_requests(_store(), state), as_json, "outbox", columns)  # type: ignore[arg-type]


@outbox_cli.command("confirm")
def outbox_confirm(
    request_id: str,
    delivered: Annotated[bool, typer.Option("--delivered/--not-delivered", help="what the platform shows")],
    platform_message_id: Annotated[str | None, typer.Option(help="the platform's id, if known")] = None,
) -> None:
    """Settle a result-unknown request after checking the platform."""
    from runtime.outbox import confirm_result

    with _operator_errors():
        request = confirm_result(_store(), request_id, delivered, platform_message_id)
    console.print(f"request {request.request_id}: {request.state}")


def _enqueue(task: str, argument: object, countdown: float = 0) -> str:
    import worker.tasks  # noqa: F401  (registers the tasks on the app)

    try:
        app.tasks[task].apply_async((argument,), countdown=countdown)
    except Exception as error:  # the broker is down: SQLite still has it, and the reconciler finds it
        return f"not queued ({type(error).__name__}); a worker's reconciler picks it up later"
    return "queued for a worker"


def _deliver(request_ids: list[str]) -> bool:
    """Attempt each request now, in order, through the worker's own send path; say what became
    of each. True when all of them were sent."""
    from worker.context import runtime_for
    from worker.delivery import attempt_send, query_receipt

    runtime = runtime_for(app)
    all_sent = True
    for request_id in request_ids:
        with _operator_errors():
            result = attempt_send(runtime, request_id)
        outcome, note = result.outcome, ""
        if outcome == "result-unknown" and query_receipt(runtime, request_id) == "settled":
            outcome = "settled"
        if outcome in ("waiting-for-earlier", "in-progress"):
            note = _enqueue("kefu.outbox.attempt", request_id)
        elif outcome == "not-submitted":
            note = _enqueue("kefu.outbox.attempt", request_id, countdown=max(1.0, result.retry_after_s or 0))
        request = query_manual(runtime.store, request_id)
        all_sent &= request.state == "sent"
        detail = request.platform_message_id or request.error_code or ""
        console.print(f"request {request_id}: {request.state} {detail} {note}".rstrip(), soft_wrap=True)
        if request.state == "result-unknown":
            console.print(
                "  the platform may or may not have it: check there, then "
                f"`kefu outbox confirm {request_id} --delivered|--not-delivered`, "
                f"or send it again with `kefu outbox retry <new id> {request_id}`",
                soft_wrap=True,
            )
    return all_sent


def _new_request_id() -> str:
    import secrets

    return f"console-{datetime.now().strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(3)}"


@outbox_cli.command("query")
def outbox_query(request_id: str) -> None:
    """Show one request; a result-unknown one is first checked with the platform's receipt query."""
    from worker.context import runtime_for
    from worker.delivery import query_receipt

    store = _store()
    with _operator_errors():
        if query_manual(store, request_id).state == "result-unknown":
            query_receipt(runtime_for(app), request_id)
        print(query_manual(store, request_id).model_dump_json(indent=2))


@outbox_cli.command("retry")
def outbox_retry(new_request_id: str, previous_request_id: str) -> None:
    """Send a result-unknown message again under a new request id (the link is kept)."""
    from runtime.manual import retry_manual

    with _operator_errors():
        request = retry_manual(_store(), new_request_id, previous_request_id)
    raise typer.Exit(0 if _deliver([request.request_id]) else 1)


@cli.command()
def send(
    customer_id: int,
    text: str,
    request_id: Annotated[
        str | None, typer.Option(help="your stable id for this message: repeat it to ask again, never to resend")
    ] = None,
    file: Annotated[Path | None, typer.Option(help="a file or image to send before the text")] = None,
) -> None:
    """Send an operator's message now (also while automatic handling is paused)."""
    from runtime.manual import ManualSend, send_manual

    settings = _settings()
    store = _store()
    request_id = request_id or _new_request_id()
    with _operator_errors():
        parts = []
        if file is not None:
            data, name = read_media_file(file, settings.media_max_bytes)
            file_send = ManualSend(
                request_id=f"{request_id}.file", customer_id=customer_id, file_name=name, file_data=data
            )
            parts.append(send_manual(store, file_send).request_id)
        text_send = ManualSend(request_id=request_id, customer_id=customer_id, text=text, follows=(parts or [None])[-1])
        parts.append(send_manual(store, text_send).request_id)
    raise typer.Exit(0 if _deliver(parts) else 1)


@cli.command()
def read(
    customer_id: int,
    reader: Annotated[str, typer.Option(help="whose watermark: one per operator or console")] = "operator",
    upto: Annotated[int | None, typer.Option(help="a message id (default: the newest message)")] = None,
) -> None:
    """Mark a customer's messages read for a reader (the watermark never moves back)."""
    from runtime.customers import ack_customer_read

    with _operator_errors():
        watermark = ack_customer_read(_store(), customer_id, reader, upto)
    console.print(f"customer {customer_id}: read by {reader} up to message {watermark}")


@cli.command("pause-input")
def pause_input_command(
    account: Annotated[str | None, typer.Option(help="only this account (default: the whole host)")] = None,
    wait: Annotated[float | None, typer.Option(help="seconds to wait for in-flight pages and turns")] = None,
) -> None:
    """Stop taking in new pages (they are held, not lost) and stop new admissions."""
    from runtime.input_pause import drained, in_flight, pause_input

    store = _store()
    with _operator_errors():
        pause_input(store, account)
    console.print(f"input paused for {account or 'the whole host'}")
    if wait is not None:
        if not drained(store, account, timeout_s=wait):
            console.print(f"not drained after {wait:g}s: {in_flight(store, account)} page(s) or turn(s) in flight")
            raise typer.Exit(1)
        console.print("drained: no page or turn in flight")


@cli.command("resume-input")
def resume_input_command(
    account: Annotated[str | None, typer.Option(help="the account paused alone (default: the host)")] = None,
) -> None:
    """Take in pages again; the pages held meanwhile are published again."""
    from runtime.input_pause import resume_input

    with _operator_errors():
        pages = resume_input(_store(), account)
    notes = {_enqueue("kefu.ingest.page", page) for page in pages}
    console.print(
        f"input resumed for {account or 'the whole host'}; {len(pages)} held page(s): {', '.join(notes) or '-'}"
    )


@cli.command()
def pause(customer_id: int, reason: Annotated[str, typer.Option(help="shown to other operators")] = "operator") -> None:
    """Pause automatic handling of a customer: unsent automatic replies are revoked."""
    from runtime.handling import pause_handling

    with _operator_errors():
        state = pause_handling(_store(), customer_id, reason)
    console.print(f"customer {customer_id}: paused (epoch {state.epoch}, reason {state.reason})")


@cli.command()
def resume(customer_id: int) -> None:
    """Resume automatic handling of a customer for new input."""
    from runtime.handling import resume_handling

    with _operator_errors():
        state = resume_handling(_store(), customer_id)
    console.print(f"customer {customer_id}: {'paused' if state.paused else 'handled automatically'}")


@cli.command()
def demo(
    data_dir: Annotated[
        Path | None, typer.Option(help="where to keep this run (default: a fresh folder under KEFU_DATA_DIR)")
    ] = None,
) -> None:
    """Play a scripted conversation through a real worker on embedded defaults."""
    from worker.demo import run_demo

    try:
        result = run_demo(data_dir, console)
    except KefuError as error:
        console.print(f"[red]kefu: {error}[/red]")
        raise typer.Exit(2) from None
    print(result.line())
    raise typer.Exit(0 if result.clean else 1)


def main() -> None:
    cli()
