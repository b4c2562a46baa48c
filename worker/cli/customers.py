"""`kefu customers`: the conversations, newest activity first; `kefu customers erase ID`: one
buyer's data out of every store, on request."""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Annotated

import typer

from worker.cli.common import (
    N_,
    CustomerId,
    SourceOption,
    _,
    cli,
    confirm,
    console,
    current_settings,
    hint_simulation,
    open_store,
    operator_errors,
    print_rows,
    print_table,
    report_source,
    shop_time,
    source_words,
)

if TYPE_CHECKING:
    from runtime.customers.erasure import ErasureReport

customers_cli = typer.Typer(help="Customers (conversations); `kefu customers` alone lists them.")
cli.add_typer(customers_cli, name="customers")


@customers_cli.callback(invoke_without_command=True)
def customers(
    ctx: typer.Context,
    search: Annotated[str | None, typer.Option(help="literal substring of title, conversation or sender name")] = None,
    account: Annotated[str | None, typer.Option(help="only this account")] = None,
    source: SourceOption = "real",
    reader: Annotated[str, typer.Option(help="whose unread counts, and who `--view mine` is")] = "operator",
    view: Annotated[str, typer.Option(help="all, mine (assigned to --reader) or unassigned")] = "all",
    status: Annotated[str | None, typer.Option(help="only open, waiting, resolved or snoozed ones")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="customers per page")] = 50,
    before: Annotated[str | None, typer.Option(help="page further back: the cursor the last page printed")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts")] = False,
) -> None:
    """Customers (conversations), most recently active first, with the buyer's name and newest line."""
    if ctx.invoked_subcommand is not None:
        return
    from runtime.customers.summaries import list_customers, parse_status, parse_view

    kind = report_source(source)
    store = open_store()
    with operator_errors():
        only = parse_status(status) if status is not None else None
        rows = list_customers(
            store, kind, account, search, limit + 1, reader, before, view=parse_view(view), status=only
        )
    page, more = rows[:limit], len(rows) > limit
    columns = [N_("id"), N_("name"), N_("preview"), N_("unread"), N_("status"), N_("assignee")]
    columns += [N_("handling_paused"), N_("last_activity_at")]
    title = _("{source} customers").format(source=source_words(kind))
    print_rows(page, as_json, title, columns, flexible="preview")
    if as_json:
        return
    if more:
        older = f"kefu customers --source {source} --before {page[-1].cursor}"
        console.print(_("(older: {command})").format(command=older), soft_wrap=True)
    if not page and kind == "real" and before is None and list_customers(store, "simulation", limit=1):
        hint_simulation(N_("customers"), "customers")


@customers_cli.command()
def erase(
    customer_id: CustomerId,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="show what would go, change nothing")] = False,
    group: Annotated[
        bool, typer.Option("--group", help="needed to erase a group conversation: every member's messages in it go")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="erase without asking")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts")] = False,
) -> None:
    """Erase one buyer's messages, replies, sessions, memory and media from every store, leaving
    an audit tombstone (who, when, how much). Idempotent; a redelivered erased message is never
    stored again, while the buyer's next message starts a new customer."""
    from runtime.customers.erasure import erase_customer, plan_erasure
    from runtime.memory.store import MemoryStore

    settings = current_settings()
    store = open_store()
    with operator_errors():
        memory = MemoryStore(settings.memory_path) if settings.memory_path.exists() else None
        images = settings.memory_images_dir
        plan = plan_erasure(store, memory, settings.sessions_dir, images, customer_id)
        report = plan
        if not dry_run:
            if plan.erased_at is None:  # not erased before (again: only what a crash left is finished)
                _confirm(plan, group, yes or as_json)
            operator = f"cli:{getpass.getuser()}"
            report = erase_customer(store, memory, settings.sessions_dir, images, customer_id, operator)
    if as_json:
        print(report.model_dump_json())
        return
    _print(report)


def _confirm(plan: ErasureReport, group: bool, yes: bool) -> None:
    if plan.conversation_type == "group" and not group:
        console.print(
            f"[red]kefu: KEFU_ERASE_GROUP: customer {plan.customer_id} is a group conversation; erasing it"
            " removes every member's messages in it (add --group to do so)[/red]",
            soft_wrap=True,
        )
        raise typer.Exit(2)
    if not yes:
        _print(plan)
        confirm(_("erase customer {id}? this cannot be undone").format(id=plan.customer_id))


def _print(report: ErasureReport) -> None:
    when = shop_time(report.erased_at or 0)
    if report.erased_at is None:
        head = _("customer {id} ({type} on {account}): would erase").format(
            id=report.customer_id, type=report.conversation_type, account=report.account_id
        )
    elif report.dry_run:
        head = _("customer {id}: erased at {time} by {operator}; files left").format(
            id=report.customer_id, time=when, operator=report.operator
        )
    else:
        head = _("customer {id}: erased at {time} by {operator}").format(
            id=report.customer_id, time=when, operator=report.operator
        )
    counts = report.counts.model_dump()
    rows = [[_(name.replace("_", " ")), str(n)] for name, n in counts.items()]  # ErasureCounts' fields, in words
    print_table(head, [N_("what"), N_("count")], rows, timed=report.erased_at is not None)  # the head's time
    if report.wal_pending:
        console.print(
            "[yellow]"
            + _(
                "the delivery store's write-ahead log was busy: erased rows leave it at its next checkpoint"
                " (run the erase again to retry now)"
            )
            + "[/yellow]",
            soft_wrap=True,
        )
