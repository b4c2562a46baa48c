"""Shards (SPEC 3.12): `kefu shards` shows who serves each one, `kefu accounts move` moves an
account between them."""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import BaseModel

from config import Settings
from runtime.errors import KefuError
from runtime.store.states import MoveStep, PlacementState
from worker.cli.accounts import accounts
from worker.cli.common import N_, _, celery_app, cli, console, current_settings, operator_errors, print_table
from worker.queues import FAMILIES, queue_name

if TYPE_CHECKING:  # loaded where used: `kefu --help` loads none of them
    from runtime.placement.moves import MoveRecord
    from worker.coordination import Coordinator


RESEND_S = 3.0  # a step's task is sent again this often until the journal moves on


class ShardView(BaseModel):
    shard: str
    holder: str | None  # the instance holding the lease; None: nobody serves the shard now
    token: int | None
    expires_in_s: float | None
    standbys: list[str]
    accounts: list[str]
    moving: list[str]  # accounts of the shard in a move
    queued: dict[str, int]  # per queue; -1: the broker cannot be asked


def shard_views(settings: Settings, coordination: Coordinator) -> list[ShardView]:
    from worker.broker import queue_depths

    placements = coordination.placements()
    names = sorted({*coordination.shards(), *(p.shard for p in placements), settings.shard})
    views = []
    for name in names:
        holder = coordination.holder(name)
        views.append(
            ShardView(
                shard=name,
                holder=holder.owner if holder else None,
                token=holder.token if holder else None,
                expires_in_s=round(holder.expires_in_ms / 1000, 1) if holder else None,
                standbys=coordination.standbys(name),
                accounts=[p.account_id for p in placements if p.shard == name and p.state == PlacementState.ACTIVE],
                moving=[p.account_id for p in placements if p.shard == name and p.state != PlacementState.ACTIVE],
                queued=queue_depths(settings, [queue_name(family, name) for family in FAMILIES]),
            )
        )
    return views


@cli.command()
def shards(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Every shard: its lease holder and fencing token, standbys, accounts and queue depths."""
    from worker.coordination import coordinator_for

    settings = current_settings()
    with operator_errors():
        views = shard_views(settings, coordinator_for(settings))
    if as_json:
        print(json.dumps([view.model_dump() for view in views], ensure_ascii=False))
        return
    rows = []
    for view in views:
        accounts_cell = ", ".join([*view.accounts, *(_("{account} (moving)").format(account=a) for a in view.moving)])
        queued = ", ".join(f"{q.split('.')[1]} {n}" for q, n in view.queued.items() if n) or "0"
        rows.append(
            [
                view.shard,
                view.holder or _("nobody"),
                str(view.token or "-"),
                _("{seconds} s").format(seconds=view.expires_in_s) if view.expires_in_s is not None else "-",
                ", ".join(view.standbys) or "-",
                accounts_cell or "-",
                queued,
            ]
        )
    columns = [N_("shard"), N_("held by"), N_("token"), N_("expires in"), N_("standbys"), N_("accounts"), N_("queued")]
    print_table(_("kefu shards"), columns, rows)


@accounts.command()
def move(
    account: str,
    to: Annotated[str, typer.Option("--to", help="the shard to move the account to")],
    op_id: Annotated[
        str | None, typer.Option(help="the move's id: rerun with it to go on after an interruption")
    ] = None,
    rollback: Annotated[bool, typer.Option(help="undo the move of --op-id (before the directory flipped)")] = False,
    timeout: Annotated[float, typer.Option(help="seconds to wait for the result (the move goes on without)")] = 300.0,
) -> None:
    """Move an account to another shard: drain and stop it, export its slice, import it on the
    target, switch the directory, release the source, resume on the target. The shards take
    the steps (their beat too): this command starts the move and waits for its result, and
    the move finishes, or rolls back past a stage's bound, even if this command dies."""
    from runtime.placement.moves import begin_move, begin_rollback, load_move
    from worker.coordination import coordinator_for

    with operator_errors():
        coordination = coordinator_for(current_settings())
        if rollback:
            if op_id is None:
                raise KefuError("KEFU_INVALID_INPUT", "--rollback needs the --op-id of the move", "")
            record = load_move(coordination, op_id)
            if record is None or record.account_id != account:
                raise KefuError("KEFU_PLACEMENT_UNKNOWN_OP", f"no move {op_id!r} of account {account!r}", "")
            record = begin_rollback(coordination, record)
        else:
            op_id = op_id or f"move-{uuid.uuid4().hex[:12]}"
            record = begin_move(coordination, op_id, account, to)
        started = time.monotonic()
        record = _drive(coordination, record, timeout)
        if record.step == MoveStep.ROLLED_BACK and not rollback:
            raise KefuError(
                record.error or "KEFU_PLACEMENT_ROLLED_BACK",
                f"move {record.op_id} rolled back: {record.detail.get('problem', 'by the operator')};"
                f" account {account} is served on {record.source} again",
                "find what held it (kefu accounts moves, the source's log), then move again with a new op id",
            )
    took = time.monotonic() - started
    console.print(
        _("move {op_id}: {step} in {seconds} s ({detail})").format(
            op_id=record.op_id,
            step=record.step,
            seconds=f"{took:.1f}",
            detail=json.dumps(record.detail, ensure_ascii=False),
        )
    )


def _drive(coordination: Coordinator, record: MoveRecord, timeout_s: float) -> MoveRecord:
    """Send each step to the shard that takes it, and resend until the journal moves on (the
    shards hand steps on themselves, and their beat resends too: this only makes it sooner)."""
    from runtime.placement.moves import FINAL_STEPS, PRE_FLIP_STEPS, load_move, save_move

    if record.error is not None and record.step in PRE_FLIP_STEPS:  # a rerun tries the step that failed again
        record = save_move(coordination, record, error=None)
    deadline = time.monotonic() + timeout_s
    sent_step: MoveStep | None = None
    sent_at = 0.0
    while record.step not in FINAL_STEPS:
        if record.error is not None and record.step in PRE_FLIP_STEPS:
            raise KefuError(
                record.error,
                f"move {record.op_id} stopped at step {record.step}: {record.detail.get('problem', '')};"
                f" it rolls back by itself {_bound_text(record)}",
                f"fix the cause and rerun with --op-id {record.op_id}, or undo it now with --rollback",
            )
        actor = record.actor() or record.source
        if record.step != sent_step or time.monotonic() - sent_at > RESEND_S:
            if record.step != sent_step:
                console.print(
                    _("move {op_id}: {step} (shard {shard})").format(op_id=record.op_id, step=record.step, shard=actor)
                )
            celery_app().tasks["kefu.placement.advance"].apply_async(
                (record.op_id,), queue=queue_name("placement", actor)
            )
            sent_step, sent_at = record.step, time.monotonic()
        if time.monotonic() > deadline:
            waiting = record.detail.get("waiting")
            raise KefuError(
                "KEFU_PLACEMENT_TIMEOUT",
                f"move {record.op_id} is at step {record.step} for {_in_step_s(record):.0f} s, shard {actor}'s to take"
                + (f" ({waiting})" if waiting and record.step == MoveStep.STOPPING else "")
                + f"; {_bound_text(record)}",
                f"the move goes on without this command; watch it with `kefu accounts moves`"
                f" (if nothing moves, check that shard {actor} has a worker and beat)",
            )
        time.sleep(0.1)
        record = load_move(coordination, record.op_id) or record
    return record


def _in_step_s(record: MoveRecord) -> float:
    from runtime.store import now_ms

    return record.in_step_ms(now_ms()) / 1000


def _bound_text(record: MoveRecord) -> str:
    """What the stage's bound does, and when (operators read it; it must not promise more)."""
    from runtime.placement.moves import PRE_FLIP_STEPS

    bound = record.bound_s()
    if bound is None:
        return "finished"
    left = bound - _in_step_s(record)
    when = f"in {left:.0f} s" if left > 0 else f"{-left:.0f} s ago"
    if record.step in PRE_FLIP_STEPS:
        return f"past its {bound:g} s bound it rolls back by itself (bound reached {when})"
    return f"it only goes forward; past {bound:g} s it shows as overdue ({when})"


class MoveView(BaseModel):
    op_id: str
    account: str
    source: str
    target: str
    step: MoveStep
    age_s: float  # since the move began
    in_step_s: float  # since it reached its step
    error: str | None
    waiting: str | None  # what the drain waits for
    next: str | None  # the shard that takes the next step
    bound_s: float | None
    then: str  # what happens at the bound: "rolls back" or "goes on"


def move_views(coordination: Coordinator) -> list[MoveView]:
    from runtime.placement.moves import PRE_FLIP_STEPS, open_moves
    from runtime.store import now_ms

    at = now_ms()
    return [
        MoveView(
            op_id=r.op_id,
            account=r.account_id,
            source=r.source,
            target=r.target,
            step=r.step,
            age_s=round((at - r.started_at) / 1000, 1),
            in_step_s=round(r.in_step_ms(at) / 1000, 1),
            error=r.error,
            waiting=r.detail.get("waiting") if r.step == MoveStep.STOPPING else None,
            next=r.actor(),
            bound_s=r.bound_s(),
            then=N_("rolls back") if r.step in PRE_FLIP_STEPS else N_("goes on"),
        )
        for r in open_moves(coordination)
    ]


@accounts.command("moves")
def moves_command(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The moves not finished yet: where each stands, which shard takes its next step, and its
    stage's bound (before the flip a stage past its bound rolls the move back by itself)."""
    from worker.coordination import coordinator_for

    with operator_errors():
        views = move_views(coordinator_for(current_settings()))
    if as_json:
        print(json.dumps([view.model_dump(mode="json") for view in views], ensure_ascii=False))
        return
    rows = [
        [
            v.op_id,
            v.account,
            f"{v.source} → {v.target}",
            v.step.value,
            _("{seconds} s").format(seconds=f"{v.age_s:g}"),
            v.error or v.waiting or "-",
            v.next or "-",
            _("{in_step}/{bound} s, then {then}").format(
                in_step=f"{v.in_step_s:g}", bound=f"{v.bound_s:g}", then=_(v.then)
            )
            if v.bound_s is not None
            else "-",
        ]
        for v in views
    ]
    columns = [N_("op id"), N_("account"), N_("shards"), N_("step"), N_("age"), N_("error / waiting"), N_("next")]
    columns.append(N_("in step / bound"))
    print_table(_("kefu accounts moves"), columns, rows)
