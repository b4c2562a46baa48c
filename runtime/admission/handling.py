"""Per-customer handling control (SPEC 3.5): a human takes over, the AI stops.

A pause bumps the customer's handling epoch. Everything automatic that was admitted under
an older epoch is stale from then on: its batch never runs, its unsent replies are revoked
(also if handling resumes later), and input already waiting is suppressed. Resuming admits
only new live input. Manual sends and history sync are not affected.
"""

from __future__ import annotations

from pydantic import BaseModel

from runtime.admission.batches import suppress_waiting
from runtime.errors import CustomerUnknown
from runtime.outbox.requests import revoke_unsent_auto
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection


class HandlingState(BaseModel):
    customer_id: int
    paused: bool
    epoch: int
    reason: str | None


def _state(conn: Connection, customer_id: int) -> HandlingState:
    row = conn.execute(queries.customer.HANDLING, {"c": customer_id}).first()
    if row is None:
        raise CustomerUnknown(customer_id)
    return HandlingState(customer_id=customer_id, paused=bool(row[0]), epoch=row[1], reason=row[2])


def handling_state(store: DeliveryStore, customer_id: int) -> HandlingState:
    with store.read() as conn:
        return _state(conn, customer_id)


def is_current(conn: Connection, customer_id: int, epoch: int) -> bool:
    """May automatic work admitted under `epoch` still act for this customer?"""
    state = _state(conn, customer_id)
    return not state.paused and state.epoch == epoch


MAX_REASON_CHARS = 200  # a reason is a line for other operators: a longer one (a model's, a form's) is cut


def clip_reason(reason: str) -> str:
    """A reason kept to one line for other operators (a model's or a form's may be any length)."""
    return reason if len(reason) <= MAX_REASON_CHARS else reason[: MAX_REASON_CHARS - 1] + "…"


def pause_handling(store: DeliveryStore, customer_id: int, reason: str, handoff: bool = False) -> HandlingState:
    """Pause automatic handling. Idempotent: pausing a paused customer changes nothing.
    `handoff`: the agent asks for a human (an alert, runtime.operators.alerts; the conversation
    waits for the shop); else an operator took over."""
    with store.write() as conn:
        return pause_in(conn, customer_id, reason, handoff)


def pause_in(conn: Connection, customer_id: int, reason: str, handoff: bool = False) -> HandlingState:
    """`pause_handling` inside the caller's write transaction (a take-over assigns in the same one)."""
    reason = clip_reason(reason)
    state = _state(conn, customer_id)
    if state.paused:
        return state
    conn.execute(queries.customer.PAUSE_HANDLING, {"c": customer_id, "r": reason, "h": handoff, "at": now_ms()})
    suppress_waiting(conn, customer_id)
    revoke_unsent_auto(conn, customer_id, "KEFU_HANDLING_PAUSED")
    return _state(conn, customer_id)


def resume_handling(store: DeliveryStore, customer_id: int) -> HandlingState:
    """Resume automatic handling for new input. Idempotent."""
    with store.write() as conn:
        return resume_in(conn, customer_id)


def resume_in(conn: Connection, customer_id: int) -> HandlingState:
    conn.execute(queries.customer.RESUME_HANDLING, {"c": customer_id})
    return _state(conn, customer_id)
