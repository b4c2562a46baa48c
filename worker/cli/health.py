"""`kefu health`: the worker's health from its heartbeat file (worker.health), for compose."""

from __future__ import annotations

import socket
from typing import Annotated

import typer

from config import SettingsError, load_settings
from runtime.errors import KefuError
from worker.cli.common import _, cli, console, operator_errors


@cli.command()
def health(
    node: Annotated[str | None, typer.Option(help="the worker's node name (default: celery@ this host's name)")] = None,
    max_age: Annotated[float, typer.Option(min=1, help="seconds since its last beat that still count healthy")] = 30,
) -> None:
    """Whether this host's worker is consuming: its heartbeat is fresh (exit 0), else exit 2."""
    from worker.health import beat_age, heartbeat_path

    name = node or f"celery@{socket.gethostname()}"
    try:  # the settings alone, not the Celery app (seconds to build): compose runs this often
        settings = load_settings()
    except SettingsError as error:
        console.print(f"kefu: {error}", soft_wrap=True)
        raise typer.Exit(2) from None
    with operator_errors():
        path = heartbeat_path(settings.data_dir, name)
        age = beat_age(path)
        if age is None:
            raise KefuError(
                "KEFU_WORKER_UNHEALTHY",
                f"worker {name} has no heartbeat at {path}",
                "start the worker (celery -A worker worker) with this data dir, or name its node with --node",
            )
        if age > max_age:
            raise KefuError(
                "KEFU_WORKER_UNHEALTHY",
                f"worker {name} last beat {age:.0f}s ago (more than {max_age:g}s)",
                "the worker is stopped, wedged or without its broker: see its log",
            )
    console.print(_("worker {name}: healthy (last beat {age:.0f}s ago)").format(name=name, age=age))
