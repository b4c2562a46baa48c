"""The `kefu` command: demo, status, config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from config import Settings
from runtime.errors import KefuError
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


@cli.command()
def status() -> None:
    """Per-stage counts read from the delivery store."""
    from runtime.status import stage_counts
    from runtime.store import DeliveryStore

    settings = _settings()
    if not settings.delivery_path.exists():
        console.print(f"no delivery store at {settings.delivery_path} yet (nothing has run with this data dir)")
        raise typer.Exit(1)
    store = DeliveryStore(settings.delivery_path, settings.delivery)
    table = Table("stage", "state", "count", title=f"kefu status · shard {settings.shard}")
    for stage in stage_counts(store):
        for state, count in sorted(stage.counts.items()) or [("-", 0)]:
            table.add_row(stage.stage, state, str(count))
    console.print(table)


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
