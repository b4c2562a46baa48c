"""Asking a platform whether the buyer read a message, on a bounded schedule (SPEC 3.9).

Some platforms (DingTalk) do not push read events; they answer a read-status query for a
while after the send. Each sent 1:1 message gets a few checks at a fixed interval, and the
schedule ends at the first read or after the last check: never an endless poll.
"""

from __future__ import annotations

from pydantic import BaseModel

from runtime.outbox.recipients import REPLY_WEBHOOK
from runtime.store import DeliveryStore
from runtime.store.sql import sql


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
            sql(
                "INSERT OR IGNORE INTO read_check (request_id, due_at, checks_left) SELECT :r, :d, :n"
                " WHERE NOT EXISTS (SELECT 1 FROM outbox_request WHERE request_id = :r AND recipient_id = :hook)"
            ),
            {"r": request_id, "d": now + interval_ms, "n": checks, "hook": REPLY_WEBHOOK},
        )


def due_read_checks(store: DeliveryStore, now: int, limit: int = 100) -> list[DueCheck]:
    with store.read() as conn:
        rows = conn.execute(
            sql(
                "SELECT r.request_id, r.account_id, r.conversation_id, r.recipient_id, r.platform_message_id"
                " FROM read_check k JOIN outbox_request r ON r.request_id = k.request_id"
                " WHERE k.due_at <= :now AND r.state = 'sent' AND r.recipient_id IS NOT NULL"
                " AND r.platform_message_id IS NOT NULL ORDER BY k.due_at LIMIT :n"
            ),
            {"now": now, "n": limit},
        ).mappings()
        return [DueCheck.model_validate(dict(row)) for row in rows]


def checked(store: DeliveryStore, request_id: str, done: bool, interval_ms: int, now: int) -> None:
    """One query was made: the schedule ends when `done` (read, or nothing to ask) or with its
    last check."""
    with store.write() as conn:
        if done:
            conn.execute(sql("DELETE FROM read_check WHERE request_id = :r"), {"r": request_id})
            return
        conn.execute(sql("DELETE FROM read_check WHERE request_id = :r AND checks_left <= 1"), {"r": request_id})
        conn.execute(
            sql("UPDATE read_check SET checks_left = checks_left - 1, due_at = :d WHERE request_id = :r"),
            {"d": now + interval_ms, "r": request_id},
        )
