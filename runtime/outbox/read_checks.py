"""Asking a platform whether the buyer read a message, on a bounded schedule (SPEC 3.9).

Some platforms (DingTalk) do not push read events; they answer a read-status query for a
while after the send. Each sent 1:1 message gets a few checks at a fixed interval, and the
schedule ends at the first read or after the last check: never an endless poll.
"""

from __future__ import annotations

from pydantic import BaseModel

from runtime.outbox.recipients import REPLY_WEBHOOK
from runtime.store import DeliveryStore, queries


class DueCheck(BaseModel):
    request_id: str
    account_id: str
    conversation_id: str
    recipient_id: str
    platform_message_id: str


def schedule_read_checks(store: DeliveryStore, request_id: str, checks: int, interval_ms: int, now: int) -> None:
    """Plan `checks` queries, the first one `interval_ms` from now (idempotent). None for a reply
    posted to a DingTalk session webhook: DingTalk keeps no read status of those (it stays sent)."""
    if checks <= 0:
        return
    with store.write() as conn:
        conn.execute(
            queries.read_check.SCHEDULE,
            {"r": request_id, "d": now + interval_ms, "n": checks, "hook": REPLY_WEBHOOK},
        )


def due_read_checks(store: DeliveryStore, now: int, limit: int = 100) -> list[DueCheck]:
    with store.read() as conn:
        rows = conn.execute(queries.read_check.DUE, {"now": now, "n": limit}).mappings()
        return [DueCheck.model_validate(dict(row)) for row in rows]


def checked(store: DeliveryStore, request_id: str, done: bool, interval_ms: int, now: int) -> None:
    """One query was made: the schedule ends when `done` (read, or nothing to ask) or with its
    last check."""
    with store.write() as conn:
        if done:
            conn.execute(queries.read_check.END_SCHEDULE, {"r": request_id})
            return
        conn.execute(queries.read_check.END_IF_LAST, {"r": request_id})
        conn.execute(queries.read_check.COUNT_DOWN, {"d": now + interval_ms, "r": request_id})
