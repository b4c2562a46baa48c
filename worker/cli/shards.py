"""Shards (SPEC 3.12): `kefu shards` shows who serves each one, `kefu accounts move` moves an
account between them."""

from __future__ import annotations

import json
import time
import uuid
from typing import Annotated

import typer
from pydantic import BaseModel

from config import Settings
from runtime.errors import KefuError
from runtime.moves import FINAL_STEPS, MoveRecord, begin_move, begin_rollback, flip, load_move, save_move
from runtime.states import MoveStep, PlacementState
from worker.broker import queue_depths
from worker.celery_app import FAMILIES, app, queue_name
from worker.cli.accounts import accounts
from worker.cli.common import cli, console, current_settings, operator_errors, print_table
from worker.coordination import Coordinator, coordinator_for

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
    settings = current_settings()
    with operator_errors():
        views = shard_views(settings, coordinator_for(settings))
    if as_json:
        print(json.dumps([view.model_dump() for view in views], ensure_ascii=False))
        return
    rows = []
    for view in views:
        accounts_cell = ", ".join([*view.accounts, *(f"{a} (moving)" for a in view.moving)])
        queued = ", ".join(f"{q.split('.')[1]} {n}" for q, n in view.queued.items() if n) or "0"
        rows.append(
            [
                view.shard,
                view.holder or "nobody",
                str(view.token or "-"),
                f"{view.expires_in_s} s" if view.expires_in_s is not None else "-",
                ", ".join(view.standbys) or "-",
                accounts_cell or "-",
                queued,
            ]
        )
    columns = ["shard", "held by", "token", "expires in", "standbys", "accounts", "queued"]
    print_table("kefu shards", columns, rows)


@accounts.command()
def move(
    account: str,
    to: Annotated[str, typer.Option("--to", help="the shard to move the account to")],
    op_id: Annotated[
        str | None, typer.Option(help="the move's id: rerun with it to go on after an interruption")
    ] = None,
    rollback: Annotated[bool, typer.Option(help="undo the move of --op-id (before the directory flipped)")] = False,
    timeout: Annotated[float, typer.Option(help="seconds to wait for the shards' steps")] = 300.0,
) -> None:
    """Move an account to another shard: drain and stop it, export its slice, import it on the
    target, switch the directory, release the source, resume on the target."""
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
    took = time.monotonic() - started
    console.print(
        f"move {record.op_id}: {record.step} in {took:.1f} s ({json.dumps(record.detail, ensure_ascii=False)})"
    )


def _drive(coordination: Coordinator, record: MoveRecord, timeout_s: float) -> MoveRecord:
    """Send each step to the shard that takes it, and resend until the journal moves on."""
    if record.error is not None:  # a rerun tries the step that failed again
        record = save_move(coordination, record, error=None)
    deadline = time.monotonic() + timeout_s
    sent_step: MoveStep | None = None
    sent_at = 0.0
    while record.step not in FINAL_STEPS:
        if record.error is not None:
            raise KefuError(
                record.error,
                f"move {record.op_id} stopped at step {record.step}: {record.detail.get('problem', '')}",
                f"fix the cause and rerun with --op-id {record.op_id}, or undo it with --rollback",
            )
        if record.step == MoveStep.IMPORTED:
            record = flip(coordination, record)
            continue
        actor = record.actor() or record.source
        if record.step != sent_step or time.monotonic() - sent_at > RESEND_S:
            if record.step != sent_step:
                console.print(f"move {record.op_id}: {record.step} (shard {actor})")
            app.tasks["kefu.placement.advance"].apply_async((record.op_id,), queue=queue_name("placement", actor))
            sent_step, sent_at = record.step, time.monotonic()
        if time.monotonic() > deadline:
            raise KefuError(
                "KEFU_PLACEMENT_TIMEOUT",
                f"move {record.op_id} is at step {record.step}; shard {actor} has not taken it",
                f"check that shard {actor} has a worker; rerun with --op-id {record.op_id} to go on",
            )
        time.sleep(0.1)
        record = load_move(coordination, record.op_id) or record
    return record
