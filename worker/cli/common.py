"""What every `kefu` command shares: the Typer app, the console, the store, error printing."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import BaseModel, ValidationError
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from config import Settings
from config.settings import SHARD_NAME, SHARD_RULE
from runtime.customers.outside_text import visible
from runtime.errors import KefuError, validation_problems
from worker.cli.words import N_ as N_  # the CLI's words: every command module takes them from here
from worker.cli.words import TranslatedGroup
from worker.cli.words import _ as _

if TYPE_CHECKING:  # loaded by the commands that use them: `kefu --help` loads none of them
    import sqlalchemy.exc
    from celery import Celery

    from runtime.customers.summaries import Source
    from runtime.pipeline import FollowUp
    from runtime.store import DeliveryStore


cli = typer.Typer(
    cls=TranslatedGroup, add_completion=False, no_args_is_help=True, help="kefu: IM customer-service worker."
)
console = Console()


def outside(text: str) -> Text:
    """Text from outside, ready to print: unsafe characters `visible`, brackets never read as
    rich markup."""
    return Text(visible(text))


def celery_app() -> Celery:
    """The worker's Celery app, built (from the settings) by the first command that needs it:
    `kefu --help` never builds it."""
    from worker.celery_app import app

    return app


def current_settings() -> Settings:
    """Validated when the worker package loads: a bad value has already stopped the process."""
    settings: Settings = celery_app().kefu_settings
    return settings


def check_shard_name(shard: str) -> None:
    if not re.fullmatch(SHARD_NAME, shard):
        raise KefuError("KEFU_INVALID_INPUT", "--shard: " + SHARD_RULE, "name a shard as KEFU_SHARD would")


def use_shard(shard: str) -> None:
    """This command works on another shard than KEFU_SHARD's."""
    settings = current_settings()
    check_shard_name(shard)
    celery_app().kefu_settings = settings.model_copy(update={"shard": shard})
    celery_app().kefu_runtime = None


def serve_shard() -> None:
    """For a command that serves the shard (listeners, the callback receiver): hold its lease,
    waiting as a standby while another instance holds it."""
    from worker.shard_lease import hold_shard

    with operator_errors():
        hold_shard(current_settings())


def open_store() -> DeliveryStore:
    """The data dir's store for a command that reads or acts on what is in it: none yet is the
    operator's answer (KEFU_STORE_MISSING, exit 2), not an empty one created by a typo'd data dir."""
    settings = current_settings()
    if not settings.delivery_path.exists():
        with operator_errors():
            raise store_missing(settings.delivery_path, "kefu demo, or a worker, creates it on its first run")
    return ensure_store()


def store_missing(path: Path, action: str) -> KefuError:
    return KefuError("KEFU_STORE_MISSING", f"no store at {path} yet (nothing has run with this data dir)", action)


def ask_secret(what: str, instead: str, confirm: bool = False) -> str:
    """A secret typed at a terminal, never echoed; `what` is its msgid (marked with N_ where it
    is written). With no terminal to ask on (a script, a container) the command stops with
    KEFU_SECRET_REQUIRED naming `instead`, the way to give it there, rather than warning that
    the secret would be echoed and then saying "Aborted."."""
    if not sys.stdin.isatty():
        with operator_errors():
            raise KefuError("KEFU_SECRET_REQUIRED", f"no terminal to ask for the {what} on", instead)
    answer: str = typer.prompt(_(what), hide_input=True, confirmation_prompt=confirm)
    return answer


def confirm(question: str) -> None:
    """The operator's yes before an irreversible step (no: "Aborted.", exit 1). With no terminal
    to ask on, KEFU_CONFIRMATION_REQUIRED (exit 2): a script says --yes."""
    if not sys.stdin.isatty():
        with operator_errors():
            raise KefuError("KEFU_CONFIRMATION_REQUIRED", "no terminal to confirm on", "pass --yes to confirm")
    typer.confirm(question, abort=True)


def ensure_store() -> DeliveryStore:
    """The data dir's store, created (and migrated) if this is its first use. A damaged or
    too-new file is the operator's answer (its code, exit 2), whichever command asked."""
    from worker.context import runtime_for

    with operator_errors():
        return runtime_for(celery_app()).store


def _operator_error(error: KefuError | sqlalchemy.exc.DatabaseError) -> KefuError | None:
    """The error as the operator sees it; None for a SQL error that is a bug, not the file's.
    A file damaged past its header, or locked, fails mid-command rather than when it is opened;
    the error names its file (the delivery store's, or a memory, coordination or ledger file)."""
    from runtime.store.connection import failed_file
    from runtime.store.failures import store_error

    if isinstance(error, KefuError):
        return error
    delivery = current_settings().delivery_path.resolve()
    path = failed_file(error) or delivery
    return store_error(path, error, delivery=path == delivery)


def _print_error(error: KefuError) -> None:
    console.print(f"[red]kefu: {error}[/red]", soft_wrap=True)


@contextmanager
def operator_errors(exit_with: Callable[[int], BaseException] = typer.Exit) -> Iterator[None]:
    """A KefuError, or the store's SQLite failing, is the operator's answer: print the code
    and exit 2, no traceback. `exit_with` is typer's Exit inside a command, SystemExit outside."""
    import redis
    import sqlalchemy.exc

    try:
        yield
    except (KefuError, sqlalchemy.exc.DatabaseError) as error:
        known = _operator_error(error)
        if known is None:
            raise
        _print_error(known)
        raise exit_with(2) from None
    except redis.RedisError as error:  # the shard leases, directory and move journal live there
        _print_error(
            KefuError(
                "KEFU_COORDINATION_UNAVAILABLE",
                f"Redis at KEFU_BROKER_URL did not answer ({type(error).__name__}); nothing was changed by this step",
                "start Redis or fix KEFU_BROKER_URL, then run the command again (a move: with the same --op-id)",
            )
        )
        raise exit_with(2) from None
    except ValidationError as error:  # an option that does not fit: name it, never echo the value
        problems = "; ".join(validation_problems(error, "input"))
        console.print(f"[red]kefu: KEFU_INVALID_INPUT: {problems}[/red]", soft_wrap=True)
        raise exit_with(2) from None


MAX_ID = 2**63 - 1  # SQLite's largest integer: a store's ids are 1 to this


def _an_id(value: int) -> int:
    if not 1 <= value <= MAX_ID:
        raise typer.BadParameter(f"KEFU_INVALID_INPUT: a customer id is 1 to {MAX_ID}")
    return value


CustomerId = Annotated[int, typer.Argument(callback=_an_id, help="the customer, as `kefu customers` lists it")]

# Every list and report shows real rows or simulated ones, never both (SPEC 3.13).
SourceOption = Annotated[str, typer.Option(help="real or simulation (they never mix)")]


def report_source(source: str) -> Source:
    """A command's --source, checked: a bad one is KEFU_INVALID_INPUT, exit 2."""
    from runtime.customers.summaries import parse_source

    with operator_errors():
        return parse_source(source)


def simulated_customers() -> set[int]:
    """Customers of simulated accounts, from this shard's delivery store: what keeps apart by
    source the rows of stores that know no accounts (memory, session logs). No delivery store
    yet: no customer is simulated."""
    from runtime.customers.summaries import simulated_customer_ids

    if not current_settings().delivery_path.exists():
        return set()
    store = ensure_store()
    with operator_errors(), store.read() as conn:
        return simulated_customer_ids(conn)


def of_source(source: Source, customer_id: int | None, simulated: set[int]) -> bool:
    """Whether a row of `customer_id` is `source`'s (a row of no customer is real)."""
    return (customer_id in simulated) if source == "simulation" else customer_id not in simulated


def hint_simulation(what: str, command: str) -> None:
    """One line after an empty real report when simulated rows exist: they are kept apart, not
    lost. `what` is a msgid (marked with N_ where it is written)."""
    console.print(
        _("no real {what} yet; simulated ones (e.g. from `kefu demo`): kefu {command} --source simulation").format(
            what=_(what), command=command
        ),
        soft_wrap=True,
    )


def source_words(source: str) -> str:
    """A --source in a title's words ("real customers"); the option's values stay as typed."""
    return _("simulation") if source == "simulation" else _("real")


def shop_time(ms: int) -> str:
    """A stored time in the shop's zone, bare: the table or page it is in names the zone once
    (`shop_zone`), so its columns stay narrow."""
    return datetime.fromtimestamp(ms / 1000, tz=current_settings().zone).strftime("%Y-%m-%d %H:%M:%S")


def shop_zone() -> str:
    """The one line that says which clock `shop_time`s are on, in the words the console's
    header uses (runtime.agent.rendering.zone_label: the zone and its offset from UTC now)."""
    from runtime.agent.rendering import zone_label

    return _("time: {zone}").format(zone=zone_label(current_settings().zone))


def print_rows(rows: Sequence[BaseModel], as_json: bool, title: str, columns: list[str], flexible: str = "") -> None:
    if as_json:
        print(json.dumps([row.model_dump() for row in rows], ensure_ascii=False))
        return
    cells = []
    for row in rows:
        values = row.model_dump()
        cells.append([shop_time(values[c]) if c.endswith("_at") else _cell(values[c]) for c in columns])
    print_table(title, columns, cells, flexible, timed=any(c.endswith("_at") for c in columns))


def _cell(value: object) -> str:
    return "-" if value is None else visible(str(value))


FLEXIBLE_MIN = 12  # a preview column wraps down to this width before a table becomes records


def print_table(title: str, columns: list[str], rows: list[list[str]], flexible: str = "", timed: bool = False) -> None:
    """A table when it fits the terminal, else one block of `field  value` lines per row: ids,
    codes and times are never cut or broken, at 80 columns as on a wide screen. Only the
    `flexible` column (a preview) wraps onto more lines to fit. A `timed` table (one with
    `shop_time` cells) says under it which zone they are in. `columns` are msgids (field
    names, marked with N_): the headers are shown translated, the title comes translated."""
    caption = shop_zone() if timed and rows else None
    headers = [_(column) for column in columns]
    widths = [max([cell_len(header), *(cell_len(row[i]) for row in rows)]) for i, header in enumerate(headers)]
    natural = sum(widths) + 3 * len(columns) + 1  # rich's box: a border and a space either side of each cell
    shrinkable = widths[columns.index(flexible)] - FLEXIBLE_MIN if flexible in columns else 0
    if natural - max(shrinkable, 0) <= console.width:
        table = Table(title=title)
        for column, header in zip(columns, headers, strict=True):
            table.add_column(header, no_wrap=column != flexible, overflow="fold")  # only the flexible one wraps
        for row in rows:
            table.add_row(*(outside(cell) for cell in row))
        console.print(table)
    else:
        _print_records(title, headers, rows)
    if caption is not None:
        console.print(caption, style="dim", highlight=False)


def _print_records(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """A table too wide for the terminal, as one block of `field  value` lines per row."""
    console.print(Text(title, style="bold"))
    pad = max(cell_len(column) for column in columns)
    for index, row in enumerate(rows):
        if index:
            console.print()
        for column, cell in zip(columns, row, strict=True):
            padded = column + " " * (pad - cell_len(column))  # by cells: a Chinese header is two wide a character
            console.print(outside(f"  {padded}  {cell}"), soft_wrap=True)


def enqueue(work: FollowUp) -> str:
    """Hand follow-up work to the workers; a broker that is down only delays it."""
    from worker.dispatch import send

    try:
        send(celery_app(), work)
    except Exception as error:  # the broker is down: SQLite still has it, and the reconciler finds it
        return _("not queued ({error}); a worker's reconciler picks it up later").format(error=type(error).__name__)
    return _("queued for a worker")
