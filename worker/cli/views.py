"""Read-only views: settings, stage counts, checkpoints, history."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from config.settings import masked_url
from worker.cli.common import (
    N_,
    CustomerId,
    SourceOption,
    _,
    check_shard_name,
    cli,
    console,
    current_settings,
    enqueue,
    hint_simulation,
    of_source,
    open_store,
    operator_errors,
    outside,
    print_rows,
    print_table,
    report_source,
    shop_time,
    shop_zone,
    simulated_customers,
    source_words,
)

if TYPE_CHECKING:
    from pathlib import Path

    from runtime.agent.rounds import Round
    from runtime.customers.summaries import Source
    from runtime.customers.transcript import TranscriptLine
    from runtime.operators.status import StageCounts
    from runtime.store import DeliveryStore


def _flatten(prefix: str, value: Any) -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [item for key, inner in value.items() for item in _flatten(f"{prefix}__{key.upper()}", inner)]
    if isinstance(value, str) and (prefix.endswith("URL") or "://" in value):
        return [(prefix, masked_url(value))]  # a broker's password, a webhook's token
    return [(prefix, "" if value is None else str(value))]


@cli.command()
def config() -> None:
    """Print the effective settings (secrets masked)."""
    settings = current_settings()
    table = Table(_("variable"), _("value"), title=_("effective kefu settings"))
    dumped = json.loads(settings.model_dump_json())  # SecretStr dumps as '**********'
    for key, value in dumped.items():
        for name, shown in _flatten(f"KEFU_{key.upper()}", value):
            table.add_row(name, shown)
    console.print(table)


@cli.command()
def status(
    shard: Annotated[str | None, typer.Option(help="another shard of this data dir (default: KEFU_SHARD)")] = None,
    all_shards: Annotated[bool, typer.Option("--all", help="every shard with a store in this data dir")] = False,
    source: SourceOption = "real",
) -> None:
    """Per-stage counts read from the delivery store."""
    settings = current_settings()
    kind = report_source(source)
    if all_shards:
        names = sorted(
            path.name.removeprefix("delivery-").removesuffix(".sqlite")
            for path in settings.data_dir.glob("delivery-*.sqlite")
        )
        for name in names:
            _status_of(name, kind)
        return
    _status_of(shard or settings.shard, kind)


def _status_of(shard: str, source: Source) -> None:
    """A shard's counts. Another shard's store is only read here: its own holder writes it."""
    from runtime.operators.status import stage_counts
    from runtime.store import DeliveryStore

    settings = current_settings()
    if shard == settings.shard:
        store = open_store()
    else:
        with operator_errors():
            check_shard_name(shard)
        path = settings.model_copy(update={"shard": shard}).delivery_path
        if not path.exists():
            console.print(
                _("shard {shard}: no store in this data dir (see `kefu shards` for who serves it)").format(shard=shard)
            )
            return
        with operator_errors():
            store = DeliveryStore(path, settings.delivery)
    title = _("kefu status · shard {shard} · {source}").format(shard=shard, source=source_words(source))
    table = Table(_("stage"), _("state"), _("count"), title=title)
    with operator_errors():
        stages = stage_counts(store, source)
    for stage in stages:
        for state, count in sorted(stage.counts.items()) or [("-", 0)]:
            table.add_row(stage.stage, state, str(count))
    console.print(table)
    if shard == settings.shard:
        _print_load(store)
        _print_checkpoints(None, source)
    _print_damaged_sessions(store, source)
    if source == "real" and not _counted(stages):
        with operator_errors():
            simulated = _counted(stage_counts(store, "simulation"))
        if simulated:
            hint_simulation(N_("rows"), "status" if shard == settings.shard else f"status --shard {shard}")


def _print_load(store: DeliveryStore) -> None:
    """What waits in the broker, and how long model calls take now (back-pressure shows here:
    turns waiting for a model slot make the calls' time grow, and the agent's queue)."""
    from runtime.operators.status import MODEL_WINDOW_S, operations
    from worker.broker import queue_depths
    from worker.queues import FAMILIES, queue_name

    settings = current_settings()
    names = [queue_name(family, settings.shard) for family in FAMILIES]
    depths = [f"{name} {depth}" for name, depth in queue_depths(settings, names).items() if depth >= 0]
    console.print(_("broker queues: {queues}").format(queues=", ".join(depths) if depths else _("not readable")))
    with operator_errors():
        now = operations(store)
    window = _("last {minutes} min").format(minutes=MODEL_WINDOW_S // 60)
    if now.model_call_mean_s is None:
        console.print(_("model calls ({window}): none").format(window=window))
    else:
        console.print(
            _("model calls ({window}): {calls}, mean {seconds} s (slot wait included)").format(
                window=window, calls=now.model_calls, seconds=f"{now.model_call_mean_s:.2f}"
            )
        )


def _counted(stages: list[StageCounts]) -> bool:
    return any(count for stage in stages for count in stage.counts.values())


def _print_damaged_sessions(store: DeliveryStore, source: Source) -> None:
    """Session logs found damaged before their tail: kept aside, each customer continued anew."""
    from runtime.agent.sessions import damaged_sessions
    from runtime.customers.summaries import simulated_customer_ids

    with store.read() as conn:
        simulated = simulated_customer_ids(conn)
        damaged = [r for r in damaged_sessions(conn) if (r.customer_id in simulated) == (source == "simulation")]
    if not damaged:
        return
    columns = [N_("customer"), N_("session"), N_("continued in"), N_("detected"), N_("kept at")]
    rows = [[str(r.customer_id), r.session_id, r.replaced_by, shop_time(r.detected_at), r.kept_path] for r in damaged]
    print_table(_("damaged session logs (kept, not repaired)"), columns, rows, timed=True)


def _print_checkpoints(account: str | None, source: Source) -> bool:
    """The table of `source`'s checkpoints; False when it had none."""
    from runtime.inbound.checkpoints import checkpoint_views

    columns = [N_("account"), N_("generation"), N_("pending"), N_("input"), N_("outbox"), N_("turns")]
    columns += [N_("reception"), N_("listener"), N_("last reported"), N_("reporting")]
    with operator_errors():
        views = checkpoint_views(open_store(), account, source)
    rows = []
    for view in views:
        report = view.report
        reporting = _("stopped (lease rejected)") if view.stopped else view.failure_class or _("ok")
        rows.append(
            [
                report.account_id,
                str(report.generation),
                str(report.pending_count),
                str(report.pending.input),
                str(report.pending.outbox),
                str(report.pending.turns),
                report.reception,
                view.listener_state + (f" ({view.listener_error})" if view.listener_error else ""),
                shop_time(view.last_reported_at) if view.last_reported_at else _("never"),
                reporting,
            ]
        )
    print_table(_("{source} checkpoints").format(source=source_words(source)), columns, rows, timed=True)
    return bool(views)


@cli.command()
def checkpoint(
    account: Annotated[str | None, typer.Option(help="only this account")] = None,
    resume: Annotated[
        str | None, typer.Option(help="start a new lease generation for this account after the sink rejected one")
    ] = None,
    source: SourceOption = "real",
) -> None:
    """Each account's checkpoint as of now (cursors are never shown), and how reporting goes."""
    from runtime.inbound.checkpoints import checkpoint_views, resume_checkpoint

    kind = report_source(source)
    if resume is not None:
        with operator_errors():
            generation = resume_checkpoint(open_store(), resume)
        console.print(
            _("checkpoint {account}: reporting resumes under generation {generation}").format(
                account=resume, generation=generation
            )
        )
    if not _print_checkpoints(account, kind) and kind == "real":
        with operator_errors():
            simulated = checkpoint_views(open_store(), account, "simulation")
        if simulated:
            hint_simulation(N_("checkpoints"), "checkpoint" + (f" --account {account}" if account else ""))


@cli.command()
def history(
    customer_id: CustomerId,
    limit: Annotated[int, typer.Option(min=1, max=500, help="stored lines per page")] = 50,
    before: Annotated[str | None, typer.Option(help="page further back: the cursor the last page printed")] = None,
    notes: Annotated[
        bool, typer.Option("--notes", help="also the agent's secondary notes: closing words, tools that only read")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts (every line, folded ones marked)")] = False,
) -> None:
    """A conversation, oldest first: the buyer's lines, the shop's replies with what became of
    each (sent, failed, result-unknown, read by the buyer) and the agent's notes for operators."""
    from runtime.admission.handling import handling_state
    from runtime.customers.transcript import transcript

    store = open_store()
    with operator_errors():
        handling_state(store, customer_id)  # an unknown customer is an error, not an empty page
        page = transcript(store, customer_id, limit, current_settings().sessions_dir, before)
    if as_json:
        print(page.model_dump_json())
        return
    from worker.transcript_words import said, who

    folded = 0
    for line in page.lines:
        if line.folded and not notes:
            folded += 1
            continue
        console.print(
            outside(f"[{shop_time(line.shown_at)}] {who(line, _)} {said(line, _)}{_outcome(line)}"),
            style="dim" if line.folded else None,
            highlight=False,
            soft_wrap=True,
        )
    # The clock once: a simulation's script time is not the shop's.
    clock = shop_zone() + (_(", the simulated conversation's script time") if page.script_time else "")
    console.print(clock, style="dim", highlight=False)
    if folded:
        hidden = _("({count} secondary notes of the agent hidden: --notes shows them)").format(count=folded)
        console.print(hidden, style="dim", highlight=False)
    if page.older is not None:
        older = f"kefu history {customer_id} --before {page.older}"
        console.print(_("(older: {command})").format(command=older), soft_wrap=True, highlight=False)


def _outcome(line: TranscriptLine) -> str:
    """A shop message's fate, with its request id wherever an operator may have to act on it."""
    if line.state is None:
        return ""
    if line.state == "sent":  # the state's name stays as stored; what the buyer did is said
        return "  · sent" + (_(", read by the buyer") if line.read else "")
    code = f" {line.error_code}" if line.error_code else ""
    return "  · " + _("{state}{code} (request {request})").format(state=line.state, code=code, request=line.request_id)


@cli.command()
def rounds(
    customer: Annotated[int | None, typer.Option(help="only this customer's rounds")] = None,
    unfinished: Annotated[
        bool,
        typer.Option(
            "--unfinished",
            "--interrupted",
            help="only the rounds salvage closes: pending (cut off by a crash, or running now) or error (ended"
            " without an answer); an interrupted round is settled and is not listed",
        ),
    ] = False,
    day: Annotated[
        str | None, typer.Option(help="only rounds started on this local day (YYYY-MM-DD, KEFU_TIMEZONE)")
    ] = None,
    salvage: Annotated[
        bool,
        typer.Option(
            "--salvage",
            help="close the listed pending and error rounds as interrupted (never re-running a tool; a round whose"
            " turn runs now is left alone), and queue the follow-up turn of each whose batch still waits",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts")] = False,
    source: SourceOption = "real",
) -> None:
    """The agent's rounds (one per turn) with their status: pending, complete, error or
    interrupted, whether each is settled (complete or interrupted) and successful (complete);
    for salvage, the unfinished ones (pending or error) of a day."""
    from datetime import date

    from runtime.agent.rounds import rounds as list_rounds
    from runtime.errors import KefuError

    kind = report_source(source)
    settings = current_settings()
    simulated = simulated_customers()
    with operator_errors():
        try:
            on = date.fromisoformat(day) if day is not None else None
        except ValueError:
            raise KefuError("KEFU_INVALID_INPUT", "--day must be a date as YYYY-MM-DD") from None
        if customer is not None and customer < 1:
            raise KefuError("KEFU_INVALID_INPUT", "--customer is a customer id, 1 or more")
        every = list_rounds(settings.sessions_dir, customer, unfinished, on, settings.zone)
        found = [r for r in every if of_source(kind, r.customer_id, simulated)]
        if salvage:
            _salvage(found, settings.sessions_dir, settings.agent.turn_lease_s, as_json)
            return
    columns = [N_("customer_id"), N_("session_id"), N_("turn"), N_("kind"), N_("started_at"), N_("status")]
    columns += [N_("reason"), N_("settled"), N_("successful")]
    print_rows(found, as_json, _("{source} rounds").format(source=source_words(kind)), columns)
    if not found and not as_json and kind == "real" and every:
        hint_simulation(N_("rounds"), "rounds")


def _salvage(found: list[Round], sessions_dir: Path, lease_s: float, as_json: bool) -> None:
    from runtime.agent.rounds import salvage
    from runtime.pipeline import RunTurn

    done = salvage(open_store(), sessions_dir, found, lease_s)
    for customer_id in sorted({s.customer_id for s in done if s.outcome == "closed" and s.batch_open}):
        console.print(
            _("customer {id}: follow-up turn {queued}").format(id=customer_id, queued=enqueue(RunTurn(customer_id)))
        )
    columns = [N_("customer_id"), N_("session_id"), N_("turn"), N_("outcome"), N_("batch_open")]
    print_rows(done, as_json, _("salvaged rounds"), columns)
