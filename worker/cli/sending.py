"""Sending as an operator: `kefu send` and the `kefu outbox` group."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from runtime.store.states import OutboxState
from worker.cli.common import (
    N_,
    CustomerId,
    SourceOption,
    _,
    celery_app,
    cli,
    console,
    current_settings,
    enqueue,
    hint_simulation,
    open_store,
    operator_errors,
    print_rows,
    report_source,
    source_words,
)

outbox_cli = typer.Typer(help="Outbox requests: list them, query one, settle or retry result-unknown ones.")
cli.add_typer(outbox_cli, name="outbox")


@outbox_cli.callback(invoke_without_command=True)
def outbox(
    ctx: typer.Context,
    state: Annotated[OutboxState | None, typer.Option(help="only requests in this state")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts")] = False,
    source: SourceOption = "real",
) -> None:
    """List outbox requests, most recently changed first."""
    from runtime.outbox.requests import list_requests

    kind = report_source(source)
    if ctx.invoked_subcommand is not None:
        return
    store = open_store()
    with operator_errors():
        rows = list_requests(store, state, source=kind)
    columns = [N_("request_id"), N_("customer_id"), N_("origin"), N_("state"), N_("error_code"), N_("updated_at")]
    print_rows(rows, as_json, _("{source} outbox").format(source=source_words(kind)), columns)
    if not rows and not as_json and kind == "real":
        with operator_errors():
            simulated = list_requests(store, state, limit=1, source="simulation")
        if simulated:
            hint_simulation(N_("outbox requests"), "outbox" + (f" --state {state}" if state else ""))


@outbox_cli.command("confirm")
def outbox_confirm(
    request_id: str,
    delivered: Annotated[bool, typer.Option("--delivered/--not-delivered", help="what the platform shows")],
    platform_message_id: Annotated[str | None, typer.Option(help="the platform's id, if known")] = None,
) -> None:
    """Settle a result-unknown request after checking the platform."""
    from runtime.outbox.requests import confirm_result

    with operator_errors():
        request = confirm_result(open_store(), request_id, delivered, platform_message_id)
    console.print(_("request {id}: {state}").format(id=request.request_id, state=request.state))


def _deliver(request_ids: list[str]) -> bool:
    """Attempt each request now, in order, through the worker's own step; say what became of
    each. True when all of them were sent."""
    from runtime import pipeline
    from runtime.outbox.manual import query_manual
    from worker.context import runtime_for

    runtime = runtime_for(celery_app())
    all_sent = True
    with operator_errors():
        for request_id in request_ids:
            query_manual(runtime.store, request_id)  # an unknown id is the operator's error, named
        steps = list(pipeline.deliver_in_order(runtime, request_ids))
    for request_id, step in steps:
        follow_ups = list(step.follow_ups)
        if pipeline.Settle(request_id) in follow_ups:  # one receipt query before asking the operator
            follow_ups.remove(pipeline.Settle(request_id))
            follow_ups += pipeline.settle(runtime, request_id).follow_ups
        note = ""
        for work in follow_ups:
            queued = enqueue(work)
            note = queued if isinstance(work, pipeline.Attempt) and work.request_id == request_id else note
        request = query_manual(runtime.store, request_id)
        all_sent &= request.state == OutboxState.SENT
        detail = request.platform_message_id or request.error_code or ""
        said = _("request {id}: {state}").format(id=request_id, state=request.state)
        console.print(f"{said} {detail} {note}".rstrip(), soft_wrap=True)
        if request.state == OutboxState.RESULT_UNKNOWN:
            console.print(
                _(
                    "  the platform may or may not have it: check there, then `{confirm}`,"
                    " or send it again with `{retry}`"
                ).format(
                    confirm=f"kefu outbox confirm {request_id} --delivered|--not-delivered",
                    retry=f"kefu outbox retry <new id> {request_id}",
                ),
                soft_wrap=True,
            )
    return all_sent


def cli_operator() -> str | None:
    """Who sends from this terminal, as `kefu customers erase` records it: `cli:` and the login
    name, so the transcript tells a command-line send from a console one by the stored row
    alone (runtime.customers.transcript). None where the system knows no login name."""
    import getpass

    from runtime.customers.transcript import CLI_OPERATOR_PREFIX

    try:
        return f"{CLI_OPERATOR_PREFIX}{getpass.getuser()}"
    except (OSError, KeyError):  # no USER/LOGNAME and no passwd entry (a bare container)
        return None


def _new_request_id() -> str:
    import secrets

    return f"console-{datetime.now().strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(3)}"


@outbox_cli.command("query")
def outbox_query(request_id: str) -> None:
    """Show one request; a result-unknown one is first checked with the platform's receipt query."""
    from runtime import pipeline
    from runtime.outbox.manual import query_manual
    from worker.context import runtime_for

    store = open_store()
    with operator_errors():
        if query_manual(store, request_id).state == OutboxState.RESULT_UNKNOWN:
            for work in pipeline.settle(runtime_for(celery_app()), request_id).follow_ups:
                enqueue(work)
        print(query_manual(store, request_id).model_dump_json(indent=2))


@outbox_cli.command("retry")
def outbox_retry(new_request_id: str, previous_request_id: str) -> None:
    """Send a result-unknown message again under a new request id (the link is kept)."""
    from runtime.outbox.manual import retry_manual

    with operator_errors():
        request = retry_manual(open_store(), new_request_id, previous_request_id, cli_operator())
    raise typer.Exit(0 if _deliver([request.request_id]) else 1)


@cli.command()
def send(
    customer_id: CustomerId,
    text: str,
    request_id: Annotated[
        str | None, typer.Option(help="your stable id for this message: repeat it to ask again, never to resend")
    ] = None,
    file: Annotated[Path | None, typer.Option(help="a file or image to send before the text")] = None,
    expect_epoch: Annotated[
        int | None,
        typer.Option(
            "--expect-epoch",
            min=0,
            help="the customer's handling epoch you saw (kefu pause prints it): refused with"
            " KEFU_HANDLING_EPOCH_CHANGED, nothing sent, if a pause or takeover moved it since",
        ),
    ] = None,
) -> None:
    """Send an operator's message now (also while automatic handling is paused)."""
    from runtime.outbox.manual import message_parts, send_manual_parts
    from runtime.outbox.media import read_media_file

    settings = current_settings()
    store = open_store()
    request_id = request_id or _new_request_id()
    with operator_errors():
        attached = read_media_file(file, settings.media_max_bytes) if file is not None else None
        parts = message_parts(request_id, customer_id, text, attached, cli_operator(), expect_epoch)
        registered = send_manual_parts(store, parts)
    raise typer.Exit(0 if _deliver([r.request_id for r in registered]) else 1)
