"""The `kefu` command: the demo, and an operator's views and actions on a data dir."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from worker.cli import (  # noqa: F401  (each registers its commands)
    accounts,
    agents,
    assignment,
    backup,
    canned,
    control,
    customers,
    health,
    imports,
    memory,
    operations,
    reports,
    routes,
    sending,
    sessions,
    shards,
    simulate,
    views,
    web,
)
from worker.cli.common import _, cli, console, operator_errors
from worker.private_files import make_private


@cli.command()
def demo(
    data_dir: Annotated[
        Path | None, typer.Option(help="where to keep this run (default: a fresh folder under KEFU_DATA_DIR)")
    ] = None,
    open_console: Annotated[
        bool, typer.Option("--console", help="then add an operator (asks) and serve the console on the demo's data")
    ] = False,
) -> None:
    """Play a scripted conversation through a real worker on embedded defaults."""
    from worker.demo import demo_dir, demo_settings, run_demo

    folder = demo_dir(data_dir)
    with operator_errors():
        result = run_demo(folder, console)
    print(
        _("demo: {messages} buyer messages, {answered} answered, {duplicates} duplicate replies, {lost} lost").format(
            messages=result.buyer_messages,
            answered=result.answered,
            duplicates=result.duplicate_replies,
            lost=result.lost,
        )
    )  # Audit.line()'s words (benches quote that one)
    if open_console:
        from worker.celery_app import app

        app.kefu_settings, app.kefu_runtime = demo_settings(folder), None  # the console serves the demo's shard
        name = typer.prompt(_("operator name"), default="demo")
        web.add_operator_prompted(name)
        web.serve_console("127.0.0.1", web.DEFAULT_PORT)
    raise typer.Exit(0 if result.clean else 1)


def main() -> None:
    """The `kefu` entry point. An error a command did not catch itself (a store that is damaged
    or too new, say) still prints its code and exits 2: an operator never sees a traceback."""
    make_private()  # what a command creates (a store, a session log) is its user's alone
    try:
        with operator_errors(SystemExit):
            cli()
    except OSError as error:  # a file a command was given or needs: name it (no filename: a bug, shown)
        if error.filename is None:
            raise
        why = error.strerror or type(error).__name__
        console.print(Text(f"kefu: KEFU_FILE_UNAVAILABLE: {error.filename}: {why}", style="red"), soft_wrap=True)
        raise SystemExit(2) from None
