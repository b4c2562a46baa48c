"""Accounts and their listeners: connect or disconnect an account, run listeners in the foreground."""

from __future__ import annotations

import signal
import threading

import typer

from worker.cli.common import app, cli, console, open_store, operator_errors

accounts = typer.Typer(no_args_is_help=True, help="Platform accounts.")
cli.add_typer(accounts, name="accounts")


@accounts.command()
def disconnect(account: str) -> None:
    """Stop listening to the account (its listener closes within a supervision interval)."""
    _set_intent(account, "disconnected")


@accounts.command()
def connect(account: str) -> None:
    """Listen to the account again."""
    _set_intent(account, "connected")


def _set_intent(account: str, intent: str) -> None:
    from runtime.accounts import set_connection_intent

    with operator_errors():
        revision = set_connection_intent(open_store(), account, intent)  # type: ignore[arg-type]
    console.print(f"account {account}: {intent} (revision {revision})")


@cli.command()
def listen() -> None:
    """Run the platform listeners of every live account in the foreground, publishing to the
    broker, until Ctrl-C or SIGTERM (workers started with `--listen` do the same)."""
    from worker.listeners import build_supervisor

    open_store()
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    supervisor = build_supervisor(app, observe=lambda change: console.print(change.describe(), soft_wrap=True))
    supervisor.start()
    console.print("listening; Ctrl-C stops")
    while not stop.wait(0.5):
        pass
    supervisor.stop()
    console.print("listeners stopped")
