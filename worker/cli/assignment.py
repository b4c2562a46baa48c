"""`kefu take-over`, `kefu assign`, `kefu resolve`, `kefu snooze`, `kefu reopen`: a
conversation's place in the team's inbox from the terminal, as the console's buttons do
(runtime.customers.assignment). Who acts is `--by` (the console's sign-in name), else the
shell's user."""

from __future__ import annotations

import getpass
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated

import typer

from worker.cli.common import CustomerId, _, cli, console, open_store, operator_errors, shop_time

if TYPE_CHECKING:
    from runtime.customers.assignment import Assignment

By = Annotated[str | None, typer.Option("--by", help="who acts, as the audit records it (default: cli:$USER)")]


def _who(by: str | None) -> str:
    return by or f"cli:{getpass.getuser()}"


def _print(found: Assignment) -> None:
    status = str(found.status)  # the state's name, as --status takes it
    if found.snoozed_until is not None and status == "snoozed":
        status += _(" until {time}").format(time=shop_time(found.snoozed_until))
    if found.handling_paused:
        handling = _("a human handles it ({reason})").format(reason=found.handling_reason)
    else:
        handling = _("the agent answers")
    if found.assignee:
        assigned = _("assigned to {assignee}").format(assignee=found.assignee)
    else:
        assigned = _("assigned to nobody")
    console.print(
        _("customer {id}: {status}, {assigned}; {handling}").format(
            id=found.customer_id, status=status, assigned=assigned, handling=handling
        ),
        soft_wrap=True,
    )


@cli.command("take-over")
def take_over(
    customer_id: CustomerId,
    operator: Annotated[str, typer.Argument(help="the operator who answers from now on")],
    reason: Annotated[str, typer.Option(help="shown to other operators")] = "",
) -> None:
    """An operator answers from now on: automatic handling pauses and the conversation is theirs."""
    from runtime.customers.assignment import take_over as take

    with operator_errors():
        _print(take(open_store(), customer_id, operator, reason))


@cli.command()
def assign(
    customer_id: CustomerId,
    operator: Annotated[str | None, typer.Argument(help="an operator's name; leave out with --nobody")] = None,
    nobody: Annotated[bool, typer.Option("--nobody", help="assigned to nobody")] = False,
    by: By = None,
) -> None:
    """Assign a conversation to an operator, or to nobody."""
    from runtime.customers.assignment import assign as give
    from runtime.errors import KefuError

    with operator_errors():
        if (operator is None) == (not nobody):
            raise KefuError("KEFU_INVALID_INPUT", "name an operator, or pass --nobody", "kefu assign 12 alice")
        _print(give(open_store(), customer_id, operator, _who(by)))


@cli.command()
def resolve(customer_id: CustomerId, by: By = None) -> None:
    """Resolve a conversation: the agent answers again, and the buyer's next message reopens it."""
    from runtime.customers.assignment import resolve as close

    with operator_errors():
        _print(close(open_store(), customer_id, _who(by)))


@cli.command()
def snooze(
    customer_id: CustomerId,
    hours: Annotated[float, typer.Option(min=0.01, max=24 * 31, help="for how long (at most a month)")] = 4.0,
    by: By = None,
) -> None:
    """Snooze a conversation: out of the open list until then, or until the buyer writes."""
    from runtime.customers.assignment import snooze as hold
    from runtime.store import now_ms

    until = now_ms() + int(timedelta(hours=hours).total_seconds() * 1000)
    with operator_errors():
        _print(hold(open_store(), customer_id, until, _who(by)))


@cli.command()
def reopen(customer_id: CustomerId, by: By = None) -> None:
    """Reopen a resolved or snoozed conversation."""
    from runtime.customers.assignment import reopen as open_again

    with operator_errors():
        _print(open_again(open_store(), customer_id, _who(by)))
