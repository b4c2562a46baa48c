"""`kefu sessions`: a customer's agent sessions (their headers), and starting a new one by
rotation or by forking the current one at an earlier event (runtime.agent.rotation)."""

from __future__ import annotations

from typing import Annotated

import typer

from worker.cli.common import (
    N_,
    _,
    cli,
    console,
    current_settings,
    open_store,
    operator_errors,
    print_rows,
    shop_time,
)

sessions_cli = typer.Typer(help="A customer's agent sessions: list, rotate, fork.", no_args_is_help=True)
cli.add_typer(sessions_cli, name="sessions")

CustomerArgument = Annotated[int, typer.Argument(help="the customer, as `kefu customers` lists it")]


@sessions_cli.command("list")
def list_sessions(
    customer_id: CustomerArgument,
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts")] = False,
) -> None:
    """The customer's sessions, oldest first: how each began, its model and its size."""
    from runtime.agent.sessions import list_sessions

    settings = current_settings()
    with operator_errors():
        rows = list_sessions(open_store(), settings.sessions_dir, customer_id)
    columns = [N_("id"), N_("current"), N_("created_at"), N_("origin"), N_("reason"), N_("parent"), N_("inherited")]
    columns += [N_("model"), N_("profile"), N_("events")]
    print_rows(rows, as_json, _("sessions of customer {customer}").format(customer=customer_id), columns)


@sessions_cli.command()
def rotate(customer_id: CustomerArgument) -> None:
    """End the customer's session and begin a new one now. Its turns go to long-term memory
    first, so the new session recalls them; the buyer's messages stay in the history."""
    from runtime.agent.rotation import rotate_by_operator
    from worker.celery_app import app
    from worker.context import runtime_for

    settings = current_settings()
    with operator_errors():
        runtime = runtime_for(app)
        header = rotate_by_operator(runtime.store, customer_id, settings.sessions_dir, runtime.memory, settings.agent)
    console.print(
        _("customer {id}: new session {session} (after {parent}, {time})").format(
            id=customer_id, session=header.id, parent=header.parent, time=shop_time(header.created_at)
        )
    )


@sessions_cli.command()
def fork(
    customer_id: CustomerArgument,
    at: Annotated[
        int | None,
        typer.Option(help="seq of the last event the fork keeps (default: the last); turn t<N> starts at seq N"),
    ] = None,
) -> None:
    """Continue the customer in a copy of their session up to an event: the agent forgets what
    came after it (the parent session stays as it was; the history keeps every message)."""
    from runtime.agent.rotation import fork_by_operator

    settings = current_settings()
    with operator_errors():
        header = fork_by_operator(open_store(), customer_id, settings.sessions_dir, settings.agent, at)
    console.print(
        _("customer {id}: new session {session}, forked from {parent} keeping events 0..{last}").format(
            id=customer_id, session=header.id, parent=header.parent, last=header.inherited - 1
        )
    )
