"""The shop's canned replies (`kefu canned list|add|edit|delete`) and operators' private notes on a
conversation (`kefu note`, `kefu notes`): the console's, from a terminal. A change is recorded
under `cli:<login>`, as `kefu customers erase` records its operator."""

from __future__ import annotations

import getpass
from typing import Annotated

import typer

from worker.cli.common import N_, CustomerId, _, cli, console, open_store, operator_errors, outside, print_rows

canned_cli = typer.Typer(help="The shop's canned replies: what operators insert by typing / and a shortcut.")
cli.add_typer(canned_cli, name="canned")

Shortcut = Annotated[str, typer.Argument(help="what follows the / in the reply box, e.g. 问候")]
Body = Annotated[str, typer.Argument(help="the reply; {buyer}/{买家} and {operator}/{客服} are filled in")]
AsJson = Annotated[bool, typer.Option("--json", help="JSON for scripts")]


def _operator() -> str:
    return f"cli:{getpass.getuser()}"


@canned_cli.command("list")
def canned_list(as_json: AsJson = False) -> None:
    """Every canned reply, by shortcut."""
    from runtime.operators.canned_replies import list_replies

    with operator_errors():
        rows = list_replies(open_store())
    columns = [N_("shortcut"), N_("body"), N_("updated_by"), N_("updated_at")]
    print_rows(rows, as_json, _("canned replies"), columns, flexible="body")


@canned_cli.command("add")
def canned_add(shortcut: Shortcut, body: Body) -> None:
    """Add a canned reply."""
    from runtime.operators.canned_replies import add_reply

    with operator_errors():
        added = add_reply(open_store(), _operator(), shortcut, body)
    console.print(outside(_("canned reply /{shortcut} added").format(shortcut=added.shortcut)), soft_wrap=True)


@canned_cli.command("edit")
def canned_edit(shortcut: Shortcut, body: Body) -> None:
    """Give a canned reply a new text."""
    from runtime.operators.canned_replies import edit_reply

    with operator_errors():
        edited = edit_reply(open_store(), _operator(), shortcut, body)
    console.print(outside(_("canned reply /{shortcut} changed").format(shortcut=edited.shortcut)), soft_wrap=True)


@canned_cli.command("delete")
def canned_delete(shortcut: Shortcut) -> None:
    """Delete a canned reply."""
    from runtime.operators.canned_replies import delete_reply

    with operator_errors():
        deleted = delete_reply(open_store(), _operator(), shortcut)
    console.print(outside(_("canned reply /{shortcut} deleted").format(shortcut=deleted.shortcut)), soft_wrap=True)


@cli.command()
def note(
    customer_id: CustomerId, text: Annotated[str, typer.Argument(help="for the shop's operators; never sent")]
) -> None:
    """Leave a private note on a conversation for the other operators (the buyer never sees it)."""
    from runtime.customers.notes import add_note

    with operator_errors():
        added = add_note(open_store(), _operator(), customer_id, text)
    console.print(_("note {id} on customer {customer} added").format(id=added.id, customer=customer_id))


@cli.command()
def notes(customer_id: CustomerId, as_json: AsJson = False) -> None:
    """Operators' private notes on a conversation, oldest first."""
    from runtime.customers.notes import list_notes

    with operator_errors():
        rows = list_notes(open_store(), customer_id)
    title = _("notes on customer {customer}").format(customer=customer_id)
    print_rows(rows, as_json, title, [N_("operator"), N_("created_at"), N_("body")], flexible="body")
