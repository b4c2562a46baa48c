"""Control: reader watermarks, handling pause per customer, input pause per account or host."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from worker.cli.common import CustomerId, _, cli, console, enqueue, open_store, operator_errors


@cli.command()
def read(
    customer_id: CustomerId,
    reader: Annotated[str, typer.Option(help="whose watermark: one per operator or console")] = "operator",
    upto: Annotated[int | None, typer.Option(help="a message id (default: the newest message)")] = None,
) -> None:
    """Mark a customer's messages read for a reader (the watermark never moves back)."""
    from runtime.customers.summaries import ack_customer_read

    with operator_errors():
        watermark = ack_customer_read(open_store(), customer_id, reader, upto)
    console.print(
        _("customer {id}: read by {reader} up to message {message}").format(
            id=customer_id, reader=reader, message=watermark
        )
    )


@cli.command("pause-input")
def pause_input_command(
    account: Annotated[str | None, typer.Option(help="only this account (default: the whole host)")] = None,
    wait: Annotated[float | None, typer.Option(min=0, help="seconds to wait for in-flight pages and turns")] = None,
) -> None:
    """Stop taking in new pages (they are held, not lost) and stop new admissions."""
    from runtime.inbound.input_pause import in_flight, pause_input

    store = open_store()
    with operator_errors():
        pause_input(store, account)
    console.print(_("input paused for {what}").format(what=account or _("the whole host")))
    if wait is not None:
        deadline = time.monotonic() + wait
        while (left := in_flight(store, account)) and time.monotonic() < deadline:
            time.sleep(0.1)
        if left:
            console.print(
                _("not drained after {seconds}s: {left} page(s) or turn(s) in flight").format(
                    seconds=f"{wait:g}", left=left
                )
            )
            raise typer.Exit(1)
        console.print(_("drained: no page or turn in flight"))


@cli.command("resume-input")
def resume_input_command(
    account: Annotated[str | None, typer.Option(help="the account paused alone (default: the host)")] = None,
) -> None:
    """Take in pages again; the pages held meanwhile are published again."""
    from runtime.pipeline import resume

    with operator_errors():
        resumed = resume(open_store(), account)
    notes = {enqueue(work) for work in resumed.follow_ups}
    console.print(
        _("input resumed for {what}; {outcome}: {notes}").format(
            what=account or _("the whole host"), outcome=resumed.outcome, notes=", ".join(notes) or "-"
        )
    )


@cli.command()
def pause(
    customer_id: CustomerId, reason: Annotated[str, typer.Option(help="shown to other operators")] = "operator"
) -> None:
    """Pause automatic handling of a customer: unsent automatic replies are revoked."""
    from runtime.admission.handling import pause_handling

    with operator_errors():
        state = pause_handling(open_store(), customer_id, reason)
    console.print(
        _("customer {id}: paused (epoch {epoch}, reason {reason})").format(
            id=customer_id, epoch=state.epoch, reason=state.reason
        )
    )


@cli.command()
def resume(customer_id: CustomerId) -> None:
    """Resume automatic handling of a customer for new input."""
    from runtime.admission.handling import resume_handling

    with operator_errors():
        state = resume_handling(open_store(), customer_id)
    handling = _("paused") if state.paused else _("handled automatically")
    console.print(_("customer {id}: {handling}").format(id=customer_id, handling=handling))
