"""`kefu import history FILE`: a shop's earlier conversations into kefu's history and memory
(runtime.inbound.history_import; the format in docs/history-import.md). Never answered."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from worker.cli.common import _, celery_app, cli, console, current_settings, ensure_store, operator_errors

if TYPE_CHECKING:  # loaded where used: `kefu --help` loads none of them
    from runtime.inbound.history_import import ImportCounts

imports = typer.Typer(no_args_is_help=True, help="Bring earlier conversations in from a file.")
cli.add_typer(imports, name="import")


@contextmanager
def _progress(description: str, total: int) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr while the block runs (none when stderr is not a terminal):
    yields what advances it."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    errors = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=errors, disable=not errors.is_terminal, transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda done: bar.advance(task, done)


@imports.command()
def history(
    file: Annotated[Path, typer.Argument(help="a JSONL or CSV file of messages (docs/history-import.md)")],
    account: Annotated[str | None, typer.Option(help="the account the messages belong to (else each line's)")] = None,
    file_format: Annotated[
        str | None, typer.Option("--format", help="jsonl or csv (default: from the file's name)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="the counts as JSON, for scripts")] = False,
) -> None:
    """Import earlier messages into each customer's history and memory; they are never answered.
    Checked whole first (nothing is stored from a file with a bad line); importing the same file
    again adds nothing, and an interrupted import goes on where it stopped."""
    from runtime.accounts.registry import require_account
    from runtime.inbound.history_import import check_against_store, parse_file, read_file, run_import
    from runtime.inbound.history_import import file_format as format_of
    from worker.context import runtime_for

    store = ensure_store()
    with operator_errors():
        if account is not None:
            with store.read() as conn:
                require_account(conn, account)
        fmt = format_of(file, file_format)
        data = read_file(file)
        with _progress(_("checking {name}").format(name=file.name), data.count(b"\n") + 1) as advance:
            parsed = parse_file(file, data, fmt, account, lambda: advance(1))
        check_against_store(store, parsed)
        runtime = runtime_for(celery_app())
        lease_s = current_settings().agent.turn_lease_s
        with _progress(_("importing {name}").format(name=file.name), len(parsed.rows)) as advance:
            counts = run_import(store, parsed, runtime.memory, lease_s, advance)
    if as_json:
        print(json.dumps(counts.model_dump()))
        raise typer.Exit(1 if counts.stopped_busy else 0)
    _print_counts(file.name, counts)


def _print_counts(name: str, counts: ImportCounts) -> None:
    if counts.finished_before:
        console.print(_("{name} was imported before: nothing new was stored").format(name=name))
    elif counts.resumed_at:
        console.print(
            _("went on from an earlier run: {done} of {rows} messages were stored already").format(
                done=counts.resumed_at, rows=counts.rows
            )
        )
    console.print(
        _("{name}: {imported} imported, {present} already present, {skipped} skipped").format(
            name=name, imported=counts.imported, present=counts.present, skipped=counts.skipped
        )
    )
    console.print(_("memory: {folders} new folders").format(folders=counts.remembered))
    if counts.not_remembered:
        console.print(
            _("memory is full for {count} conversation(s) (their folder cap): stored, not remembered").format(
                count=counts.not_remembered
            )
        )
    if counts.stopped_busy:
        console.print(_("stopped: an agent turn kept a conversation's memory busy; import the file again to go on"))
        raise typer.Exit(1)
