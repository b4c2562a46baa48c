"""Checkpoints (SPEC 3.10): per account, what is committed and what is still pending.

A report carries the committed provider cursors, `pending_count` (admissible input not yet
committed to a session, outbox requests waiting or sending, and agent batches whose turn is
not verified complete) and the reception state. Reports are throttled per account. The sink's
answer is recorded here; a sink that rejects the lease generation stops reporting until an
operator resumes with a new local generation, and a late answer about an older generation
can never stop the new one. Failure diagnostics are worded here and returned once per change
of failure class (and once on recovery): code, status and reason only.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from runtime.accounts.registry import account_ids, require_account
from runtime.customers.summaries import Source, source_param
from runtime.inbound.inbox import received_not_ingested
from runtime.inbound.input_pause import count_in_flight, is_paused
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection
from runtime.store.tables import CheckpointState

Reception = Literal["running", "draining", "paused", "stopped"]


class PendingCounts(BaseModel):
    input: int  # admissible messages not yet committed to a session
    outbox: int  # requests waiting for or in their attempt
    turns: int  # admitted batches whose turn is not verified complete


class CheckpointReport(BaseModel):
    model_config = ConfigDict(frozen=True)
    account_id: str
    generation: int
    computed_at: int
    cursors: dict[str, str]  # stream id -> provider cursor (for the sink only: never logged)
    pending_count: int
    pending: PendingCounts
    reception: Reception


class SinkOutcome(BaseModel):
    """What the sink said: accepted, rejected this lease generation, or failed (safe fields only)."""

    model_config = ConfigDict(frozen=True)
    result: Literal["accepted", "rejected", "failed"]
    code: str | None = None
    status: int | None = None
    reason: str | None = None

    @property
    def failure_class(self) -> str:
        return f"{self.code}/{self.status}"


def _reception(conn: Connection, account_id: str) -> Reception:
    """Paused input wins (draining until nothing is in flight); otherwise live input needs a
    running listener (history sync alone is not `running`)."""
    if is_paused(conn, account_id):
        return "draining" if count_in_flight(conn, account_id) else "paused"
    listener = conn.execute(queries.account.LISTENER_STATE, {"a": account_id}).scalar()
    return "running" if listener == "running" else "stopped"


def compute_report(conn: Connection, account_id: str, generation: int) -> CheckpointReport:
    params = {"a": account_id}
    pending = PendingCounts(
        input=conn.execute(queries.inbound_message.PENDING_INPUT_COUNT, params).scalar_one()
        + received_not_ingested(conn, account_id),
        outbox=conn.execute(queries.outbox_request.OPEN_COUNT, params).scalar_one(),
        turns=conn.execute(queries.admission_batch.OPEN_COUNT, params).scalar_one(),
    )
    cursors: dict[str, str] = {
        stream_id: cursor for stream_id, cursor in conn.execute(queries.provider_cursor.OF_ACCOUNT, params)
    }
    return CheckpointReport(
        account_id=account_id,
        generation=generation,
        computed_at=now_ms(),
        cursors=cursors,
        pending_count=pending.input + pending.outbox + pending.turns,
        pending=pending,
        reception=_reception(conn, account_id),
    )


def _state(conn: Connection, account_id: str) -> CheckpointState:
    conn.execute(queries.checkpoint_state.ENSURE, {"a": account_id})
    row = conn.execute(queries.checkpoint_state.BY_ACCOUNT, {"a": account_id}).mappings()
    return CheckpointState.model_validate(dict(row.one()))


def due_report(store: DeliveryStore, account_id: str, interval_ms: int, now: int) -> CheckpointReport | None:
    """The account's report if one is due (throttled per account), else None. Claims the slot,
    so two reporters in one interval send one report."""
    with store.write() as conn:
        state = _state(conn, account_id)
        if state.rejected_generation == state.generation:
            return None  # the sink refused this generation: wait for resume_checkpoint
        if state.last_attempt_at is not None and now - state.last_attempt_at < interval_ms:
            return None
        conn.execute(queries.checkpoint_state.CLAIM_ATTEMPT, {"now": now, "a": account_id})
        return compute_report(conn, account_id, state.generation)


def record_outcome(store: DeliveryStore, report: CheckpointReport, outcome: SinkOutcome) -> str | None:
    """Keep the sink's answer. Returns the one diagnostic line to print, if this answer changes
    the account's failure class (or recovers from one); None otherwise."""
    account = report.account_id
    with store.write() as conn:
        state = _state(conn, account)
        if report.generation != state.generation:
            return None  # a late answer about an older generation changes nothing
        if outcome.result == "accepted":
            conn.execute(
                queries.checkpoint_state.RECORD_ACCEPTED,
                {"r": report.model_dump_json(), "at": report.computed_at, "a": account},
            )
            return f"checkpoint {account}: reporting again" if state.failure_class else None
        if outcome.result == "rejected":
            conn.execute(queries.checkpoint_state.RECORD_REJECTED, {"f": "rejected", "a": account})
            return (
                f"checkpoint {account}: KEFU_CHECKPOINT_LEASE_REJECTED generation {report.generation} "
                f"(status {outcome.status}); reporting stopped until `kefu checkpoint --resume {account}`"
            )
        if outcome.failure_class == state.failure_class:
            return None
        conn.execute(queries.checkpoint_state.RECORD_FAILURE, {"f": outcome.failure_class, "a": account})
        return (
            f"checkpoint {account}: {outcome.code} status {outcome.status} ({outcome.reason}); "
            "local facts kept, retrying every interval"
        )


def resume_checkpoint(store: DeliveryStore, account_id: str) -> int:
    """Start a new local generation (after the sink rejected the old one). Returns it."""
    with store.write() as conn:
        require_account(conn, account_id)
        state = _state(conn, account_id)
        conn.execute(queries.checkpoint_state.NEW_GENERATION, {"g": state.generation + 1, "a": account_id})
        return state.generation + 1


class CheckpointView(BaseModel):
    """What an operator sees: the report as of now, and how reporting is going."""

    report: CheckpointReport
    last_reported_at: int | None
    failure_class: str | None
    stopped: bool
    listener_state: str
    listener_error: str | None


def checkpoint_views(
    store: DeliveryStore, account_id: str | None = None, source: Source | None = None
) -> list[CheckpointView]:
    """`source`: only that source's accounts (None: both); a named account of the other source
    is no error, just not shown (SPEC 3.13: real and simulated rows never mix)."""
    with store.write() as conn:  # a first look creates the account's checkpoint state
        if account_id is not None:
            require_account(conn, account_id)
        accounts = [account_id] if account_id is not None else account_ids(conn)
        if source is not None:
            kept = set(conn.execute(queries.account.IDS_OF_SOURCE, {"sim": source_param(source)}).scalars())
            accounts = [account for account in accounts if account in kept]
        views = []
        for account in accounts:
            state = _state(conn, account)
            listener = conn.execute(queries.account.LISTENER, {"a": account}).one()
            views.append(
                CheckpointView(
                    report=compute_report(conn, account, state.generation),
                    last_reported_at=state.last_reported_at,
                    failure_class=state.failure_class,
                    stopped=state.rejected_generation == state.generation,
                    listener_state=listener[0],
                    listener_error=listener[1],
                )
            )
    return views
