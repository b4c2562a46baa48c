"""Rounds: each turn of the agent (turn/start … turn/end in a customer's session log) with its
status, so an operator can see which rounds did not finish and salvage them (seed 000).

A round is `pending` until its turn/end (running now, or orphaned by a crash until the next
turn repairs it), then `complete`, `error` (it ran out of steps without an answer) or
`interrupted` (a human took over, the model stayed unavailable, or salvage closed it). Two
questions are kept apart, as the seed insists: whether a round is *settled* (it was brought to a
proper end, so its content can serve as context: complete or interrupted) and whether it was
*successful* (complete only; an interrupted round ended normally but may hold a fallback or a
cut-off answer). `pending` and `error` are the unfinished rounds: crash residue and failures
that salvage closes as `interrupted` (seed 000: `listInterruptedRecent` lists `pending || error`,
never an interrupted round, which is already a settled stop).

The log is append-only, so an `error` round is salvaged by a second `turn/end` of its turn with
outcome `interrupted`: the last `turn/end` of a turn is its outcome (as every reader of the log
folds it), and the first stays as the record of what went wrong (`reason` reads `salvaged`).

Days are the shop's local days: a round belongs to day D when it started within [D 00:00,
D+1 00:00) in the shop's zone, converted to UTC instants per day, so a day across a DST change
is 23 or 25 hours long and a round just before local midnight is not filed under the UTC date.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel

from runtime.admission.batches import load_customer
from runtime.agent.repair import close_unfinished, repair, waiting_for_model
from runtime.agent.session_log import CorruptSessionLog, SessionLog, TurnEnd, TurnStart, own_from
from runtime.agent.sessions import damaged_folder, open_session
from runtime.store import DeliveryStore, leases, queries
from runtime.store.states import BatchState

RoundStatus = Literal["pending", "complete", "error", "interrupted"]
_SESSION_FILE = re.compile(r"s(\d+)-(\d+)\.jsonl\.zst")


UNFINISHED: tuple[RoundStatus, ...] = ("pending", "error")  # what salvage closes


def is_settled(status: RoundStatus) -> bool:
    """The round was brought to a proper end, so it can serve as context: complete or
    interrupted (seed 000 `isRoundSettled`). An `error` round is not: salvage closes it."""
    return status in ("complete", "interrupted")


def is_successful(status: RoundStatus) -> bool:
    """The round ran to its end as planned: `complete` only."""
    return status == "complete"


class Round(BaseModel):
    customer_id: int
    session_id: str
    turn: str
    batch_id: str
    kind: str  # batch | follow-up
    started_at: int  # ms
    ended_at: int | None
    status: RoundStatus
    reason: str | None  # why an interrupted round stopped; `salvaged`: it had ended in error
    settled: bool
    successful: bool


def local_day_bounds(day: date, zone: ZoneInfo) -> tuple[int, int]:
    """[start, end) of the shop's local day, in ms since the epoch."""
    start = datetime.combine(day, time(), tzinfo=zone)
    end = datetime.combine(day + timedelta(days=1), time(), tzinfo=zone)
    return int(start.timestamp() * 1000), int(end.timestamp() * 1000)


def rounds(
    sessions_dir: Path,
    customer_id: int | None = None,
    unfinished: bool = False,
    day: date | None = None,
    zone: ZoneInfo | None = None,
) -> list[Round]:
    """Every round of the sessions in `sessions_dir` (of one customer), oldest first; with
    `unfinished`, only the ones salvage closes (pending or error); with `day`, those started on
    that local day in `zone`. A damaged log is left out (its session was retired and kept aside)."""
    bounds = local_day_bounds(day, zone or ZoneInfo("UTC")) if day is not None else None
    found = [
        r
        for path in _session_files(sessions_dir, customer_id)
        for r in _rounds_of(path)
        if (not unfinished or r.status in UNFINISHED) and (bounds is None or bounds[0] <= r.started_at < bounds[1])
    ]
    return sorted(found, key=lambda r: (r.started_at, r.customer_id, r.turn))


def _session_files(sessions_dir: Path, customer_id: int | None) -> Iterator[Path]:
    pattern = f"s{customer_id}-*.jsonl.zst" if customer_id is not None else "s*-*.jsonl.zst"
    damaged = damaged_folder(sessions_dir)
    for path in sorted(sessions_dir.glob(pattern)):
        if path.parent != damaged and _SESSION_FILE.fullmatch(path.name):
            yield path


def _rounds_of(path: Path) -> list[Round]:
    match = _SESSION_FILE.fullmatch(path.name)
    assert match is not None
    log = SessionLog(path)
    try:
        events = log.load()
    except (CorruptSessionLog, OSError):
        return []
    ends: dict[str, list[TurnEnd]] = {}
    for e in events:
        if isinstance(e, TurnEnd):
            ends.setdefault(e.turn, []).append(e)
    out = []
    own = own_from(log)  # a fork's copied turns are its parent's rounds
    for start in (e for e in events if isinstance(e, TurnStart) and e.seq >= own):
        closed = ends.get(start.turn, [])
        end = closed[-1] if closed else None  # the last turn/end is the outcome (salvage appends one)
        status: RoundStatus = "pending" if end is None else "interrupted" if end.outcome == "forked" else end.outcome
        reason: str | None = end.reason if end is not None else None
        if reason is None and len(closed) > 1 and closed[0].outcome == "error" and status == "interrupted":
            reason = "salvaged"
        out.append(
            Round(
                customer_id=int(match[1]),
                session_id=path.name.removesuffix(".jsonl.zst"),
                turn=start.turn,
                batch_id=start.batch_id,
                kind=start.kind,
                started_at=start.at,
                ended_at=end.at if end is not None else None,
                status=status,
                reason=reason,
                settled=is_settled(status),
                successful=is_successful(status),
            )
        )
    return out


# --- salvage ---------------------------------------------------------------------------------

SalvageOutcome = Literal["closed", "busy", "not-current", "already-ended"]


class Salvaged(BaseModel):
    customer_id: int
    session_id: str
    turn: str
    outcome: SalvageOutcome
    batch_open: bool  # its batch still waits: a follow-up turn answers it


def salvage(store: DeliveryStore, sessions_dir: Path, found: list[Round], lease_s: float) -> list[Salvaged]:
    """Close the unfinished rounds among `found` as `interrupted` (seed 000: salvage turns crash
    residue and failed rounds into ended ones), each under its customer's writer lease, never
    re-running a tool: a `pending` round with the same closers the customer's next turn would
    append; an `error` round with a `turn/end(interrupted)` of its turn after the log's tail
    (any open turn at the tail is closed first, so the tail still tells whether a turn is open).
    A round whose turn is running now (the lease is held, or a run waits to retry its model
    call) is left alone (`busy`). Only a customer's current session is written: an ended one
    was closed when it ended."""
    out = []
    for r in (r for r in found if r.status in UNFINISHED):
        with store.read() as conn:
            customer = load_customer(conn, r.customer_id)
            open_batch = conn.execute(
                queries.admission_batch.IS_OPEN,
                {"b": r.batch_id, "claimed": BatchState.CLAIMED, "committed": BatchState.COMMITTED},
            ).first()
        outcome: SalvageOutcome
        if customer is None or customer.session_id != r.session_id:
            outcome = "not-current"
        else:
            with leases.held(store, f"customer:{r.customer_id}", lease_s) as fence:
                if fence is None:
                    outcome = "busy"
                else:
                    session = open_session(store, r.customer_id, sessions_dir, fence)
                    if session.session_id != r.session_id:  # its log was damaged and retired just now
                        outcome = "not-current"
                    elif waiting_for_model(session.log) is not None:  # its turn goes on at the next run
                        outcome = "busy"
                    elif r.status == "pending":
                        outcome = "closed" if repair(session.log) else "already-ended"
                    else:
                        outcome = _close_failed(session.log, r.turn)
        out.append(Salvaged(customer_id=r.customer_id, session_id=r.session_id, turn=r.turn, outcome=outcome,
                            batch_open=open_batch is not None))  # fmt: skip
    return out


def _close_failed(log: SessionLog, turn: str) -> SalvageOutcome:
    """An `error` round ends `interrupted`, unless its last turn/end says so already (salvaged
    before). An open turn at the tail is closed first (the caller made sure none waits for a
    model retry), so the tail stays honest for every reader that asks it whether a turn is open
    (repair, a fork's cut)."""
    close_unfinished(log)
    ends = [e for e in log.of_type("turn/end") if isinstance(e, TurnEnd) and e.turn == turn]
    if not ends or ends[-1].outcome != "error":
        return "already-ended"
    log.append("turn/end", turn=turn, outcome="interrupted")
    log.flush()
    return "closed"
