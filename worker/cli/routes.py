"""Routes: which conversations of an account the agent handles (SPEC 3.2)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Annotated

import typer

from worker.cli.common import N_, _, cli, console, current_settings, open_store, operator_errors, print_rows

if TYPE_CHECKING:  # the CLI loads the store when a command runs, not at import
    from runtime.store import DeliveryStore

routes = typer.Typer(no_args_is_help=True, help="Routes: which conversations the agent answers, and when.")
cli.add_typer(routes, name="routes")

OpId = Annotated[str | None, typer.Option(help="operation id: replaying it returns the stored result")]
# A change as of the revision the operator saw (`kefu routes list`): one made since is refused
# (KEFU_REVISION_CONFLICT) rather than overwritten.
Revision = Annotated[int | None, typer.Option(help="the revision you looked at (default: the current one)")]


def _op(op_id: str | None, verb: str) -> str:
    return op_id or f"route-{verb}-{uuid.uuid4().hex[:12]}"


@routes.command("add")
def add_route(
    route: str,
    account: Annotated[str, typer.Option(help="the account whose conversations it covers")],
    conversation_type: Annotated[str, typer.Option("--type", help="direct or group")],
    conversation: Annotated[str | None, typer.Option(help="one conversation id (default: all of the type)")] = None,
    peer: Annotated[str | None, typer.Option(help="direct only: the platform peer of that conversation")] = None,
    mention: Annotated[bool, typer.Option(help="group: answer when the robot is mentioned")] = False,
    every_n: Annotated[int | None, typer.Option(help="group: answer every n-th message")] = None,
    interval_s: Annotated[int | None, typer.Option(help="group: answer at most every this many seconds")] = None,
    profile: Annotated[
        str | None, typer.Option(help="the agent profile that answers (`kefu agents list`; default: the default)")
    ] = None,
    observe: Annotated[
        bool, typer.Option("--observe", help="only listen: store its conversations, never answer (see `routes answer`)")
    ] = False,
    op_id: OpId = None,
) -> None:
    """Add a route (a specific conversation's route beats the account's `all` route)."""
    from pydantic import ValidationError

    from runtime.admission.routes import RouteSpec, create_route
    from runtime.errors import KefuError

    with operator_errors():
        try:
            spec = RouteSpec(
                id=route,
                account_id=account,
                conversation_type=conversation_type,  # type: ignore[arg-type]  # a str from Typer; pydantic checks it
                target="specific" if conversation else "all",
                conversation_id=conversation,
                peer_id=peer,
                trigger_mention=mention,
                trigger_every_n=every_n,
                trigger_interval_s=interval_s,
                agent_preset=profile,
                mode="observe" if observe else "answer",
            )
        except ValidationError as error:
            problems = "; ".join(e["msg"].removeprefix("Value error, ") for e in error.errors(include_input=False))
            raise KefuError("KEFU_ROUTE_INVALID", problems, "fix the options and try again") from None
        settings = current_settings()
        batch, profiles = settings.admission.batch_size, settings.agent.profile_names
        saved = create_route(open_store(), spec, _op(op_id, "add"), batch_size=batch, profiles=profiles)
    console.print(
        _("route {id} added for account {account} (revision {revision})").format(
            id=saved.id, account=saved.account_id, revision=saved.revision
        )
    )


@routes.command("list")
def list_command(
    account: Annotated[str | None, typer.Option(help="only this account's routes")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Routes with their triggers, state and revision."""
    from runtime.admission.routes import list_routes

    columns = [N_("id"), N_("account_id"), N_("conversation_type"), N_("target"), N_("conversation_id")]
    columns += [N_("enabled"), N_("mode"), N_("agent_preset"), N_("revision")]
    print_rows(list_routes(open_store(), account), as_json, _("routes"), columns)


@routes.command()
def enable(route: str, op_id: OpId = None, revision: Revision = None) -> None:
    """Answer this route's conversations again (only new input)."""
    _set_enabled(route, True, op_id, revision)


@routes.command()
def disable(route: str, op_id: OpId = None, revision: Revision = None) -> None:
    """Stop answering: replies admitted under the route and not yet sent never go out."""
    _set_enabled(route, False, op_id, revision)


def _set_enabled(route: str, enabled: bool, op_id: str | None, revision: int | None) -> None:
    from runtime.admission.routes import RouteChanges, update_route

    store = open_store()
    with operator_errors():
        changes = RouteChanges(enabled=enabled)
        saved = update_route(store, route, _seen(store, route, revision), changes, _op(op_id, "update"))
    state = _("enabled") if saved.enabled else _("disabled")
    console.print(
        _("route {id}: {state} (revision {revision})").format(id=saved.id, state=state, revision=saved.revision)
    )


@routes.command("set-profile")
def set_profile(
    route: str,
    profile: Annotated[str, typer.Argument(help="a profile of `kefu agents list`; `default`: the top-level agent")],
    op_id: OpId = None,
    revision: Revision = None,
) -> None:
    """Answer this route's conversations as another agent profile (their sessions begin anew)."""
    from runtime.admission.routes import RouteChanges, update_route

    store = open_store()
    profiles = current_settings().agent.profile_names
    with operator_errors():
        changes = RouteChanges(agent_preset=None if profile == "default" else profile)
        saved = update_route(
            store, route, _seen(store, route, revision), changes, _op(op_id, "update"), profiles=profiles
        )
    console.print(
        _("route {id}: agent profile {profile} (revision {revision})").format(
            id=saved.id, profile=saved.agent_preset or "default", revision=saved.revision
        )
    )


@routes.command()
def observe(route: str, op_id: OpId = None, revision: Revision = None) -> None:
    """Only listen: store this route's conversations (history, memory), never answer them."""
    _set_mode(route, "observe", op_id, revision)


@routes.command()
def answer(route: str, op_id: OpId = None, revision: Revision = None) -> None:
    """Answer this route's conversations again: only what buyers write from now on."""
    _set_mode(route, "answer", op_id, revision)


def _set_mode(route: str, mode: str, op_id: str | None, revision: int | None) -> None:
    from runtime.admission.routes import RouteChanges, update_route

    store = open_store()
    with operator_errors():
        changes = RouteChanges(mode=mode)  # type: ignore[arg-type]  # "answer" or "observe", from the command
        saved = update_route(store, route, _seen(store, route, revision), changes, _op(op_id, "update"))
    said = _("observes (stores, never answers)") if saved.mode == "observe" else _("answers")
    console.print(
        _("route {id}: {state} (revision {revision})").format(id=saved.id, state=said, revision=saved.revision)
    )


@routes.command()
def delete(route: str, op_id: OpId = None, revision: Revision = None) -> None:
    """Remove a route; history stays."""
    from runtime.admission.routes import delete_route

    store = open_store()
    with operator_errors():
        delete_route(store, route, _seen(store, route, revision), _op(op_id, "delete"))
    console.print(_("route {id} deleted").format(id=route))


@routes.command("open")
def open_conversation(route: str) -> None:
    """Open a direct conversation's route so the shop can write first."""
    from runtime.outbox.first_contact import open_route_conversation

    with operator_errors():
        customer = open_route_conversation(open_store(), route)
    console.print(
        _("route {id}: customer {customer}; write first with `kefu send {customer} TEXT`").format(
            id=route, customer=customer
        )
    )


def _seen(store: DeliveryStore, route: str, revision: int | None) -> int:
    """The revision a change is made as of: the one the operator saw, else the current one."""
    from runtime.admission.routes import current_revision

    return current_revision(store, route) if revision is None else revision
