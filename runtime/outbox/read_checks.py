"""Asking a platform once whether the buyer read a message (SPEC 3.9).

Some platforms (DingTalk) do not push read events; they answer a read-status query for a
while after the send (DingTalk: 24 h), and every query counts against the app's rate limit
(20 QPS per app per API). So each sent 1:1 message gets at most one query per provider
generation and no polling: one check, due a fixed delay after the send.

The check is marked made (`queried_at`) in the transaction that claims it, committed to disk
before the platform is asked, as the seed's read receipts persist their attempt mark before
calling the SDK. Whatever happens next (the query fails, the worker dies mid-query, the task is
redelivered, two rounds overlap, the shard restarts), nobody asks about that message again; a
failed query leaves it unconfirmed and is not retried.

A provider generation: for DingTalk a message's read status belongs to its send (the
processQueryKey DingTalk answered that send with, which no later connection or token renews),
so its one generation is the send's and a message is asked about once, ever. A message sent
again (`retry_manual`) is a new request, sent anew, with its own check.
"""

from __future__ import annotations

import json

from pydantic import BaseModel

from runtime.outbox.recipients import REPLY_WEBHOOK
from runtime.store import DeliveryStore, queries


class DueCheck(BaseModel):
    request_id: str
    account_id: str
    conversation_id: str
    recipient_id: str
    platform_message_id: str


def schedule_read_checks(store: DeliveryStore, request_id: str, checks: int, delay_ms: int, now: int) -> None:
    """Plan the message's one query, `delay_ms` from now, unless `checks` is 0 (queries are off).
    Idempotent: a message has one check, made or not. None for a reply posted to a DingTalk
    session webhook: DingTalk keeps no read status of those (it stays sent)."""
    if checks <= 0:
        return
    with store.write() as conn:
        conn.execute(queries.read_check.SCHEDULE, {"r": request_id, "d": now + delay_ms, "hook": REPLY_WEBHOOK})


def claim_due_read_check(store: DeliveryStore, now: int) -> DueCheck | None:
    """The oldest check due at `now`, marked made in the same transaction, on disk before this
    returns: the caller makes its query at most once, and no other caller gets it. One at a
    time, so a crash mid-round loses the query under way, not those still to come."""
    with store.write(durable=True) as conn:
        row = conn.execute(queries.read_check.DUE, {"now": now, "n": 1}).mappings().first()
        if row is None:
            return None
        check = DueCheck.model_validate(dict(row))
        conn.execute(queries.read_check.MARK_QUERIED, {"now": now, "ids": json.dumps([check.request_id])})
    return check
