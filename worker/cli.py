"""The `kefu` command: demo, status, config."""

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
    settings = _settings()
    if not settings.delivery_path.exists():
        console.print(f"no delivery store at {settings.delivery_path} yet (nothing has run with this data dir)")
        raise typer.Exit(1)
    return DeliveryStore(settings.delivery_path, settings.delivery)


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


@cli.command()
def customers(
    search: Annotated[str | None, typer.Option(help="literal substring of title, conversation or sender name")] = None,
    account: Annotated[str | None, typer.Option(help="only this account")] = None,
    source: Annotated[str, typer.Option(help="real or simulation (they never mix)")] = "real",
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts")] = False,
) -> None:
    """Customers (conversations), most recently active first."""
    from runtime.customers import list_customers

    if source not in ("real", "simulation"):
        console.print(f"[red]kefu: --source must be real or simulation, not {source!r}[/red]")
        raise typer.Exit(2)
    rows = list_customers(_store(), source=source, account_id=account, search=search)  # type: ignore[arg-type]
    columns = ["id", "account_id", "conversation_id", "handling_paused", "last_activity_at"]
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


outbox_cli = typer.Typer(help="Outbox requests: list them, and settle result-unknown ones.")
cli.add_typer(outbox_cli, name="outbox")


@outbox_cli.callback(invoke_without_command=True)
def outbox(
    ctx: typer.Context,
    state: Annotated[
        str | None, typer.Option(help="pending, sending, sent, failed, result-unknown, revoked, …")
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
