"""What is pending in SQLite and overdue: the reconciler re-enqueues exactly this, so a lost or
duplicated broker message never loses or repeats work."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime.store import DeliveryStore, now_ms
from runtime.store.sql import sql

LIMIT = 1000


@dataclass
class PendingWork:
    admissions: list[int] = field(default_factory=list)  # customer ids with unclaimed input
    turns: list[int] = field(default_factory=list)  # customer ids with an open batch
    attempts: list[str] = field(default_factory=list)  # outbox requests to attempt
    settlements: list[str] = field(default_factory=list)  # result-unknown requests to query


def pending_work(store: DeliveryStore, grace_s: float, attempt_lease_s: float, receipt_query_limit: int) -> PendingWork:
    now = now_ms()
    quiet = now - int(grace_s * 1000)
    with store.read() as conn:

        def ids(query: str, **params: object) -> list[Any]:
            return [row[0] for row in conn.execute(sql(query), {"n": LIMIT, **params})]

        return PendingWork(
            admissions=ids(
                "SELECT DISTINCT customer_id FROM inbound_message WHERE state = 'pending'"
                " AND sender_role IN ('external', 'human-native') AND received_at < :t LIMIT :n",
                t=quiet,
            ),
            turns=ids(
                "SELECT customer_id FROM admission_batch WHERE state IN ('claimed', 'committed')"
                " AND updated_at < :t LIMIT :n",
                t=quiet,
            ),
            attempts=ids(
                "SELECT request_id FROM outbox_request WHERE (state = 'pending' AND updated_at < :t)"
                " OR (state = 'sending' AND updated_at < :lease) LIMIT :n",
                t=quiet,
                lease=now - int(attempt_lease_s * 1000),
            ),
            settlements=ids(
                "SELECT request_id FROM outbox_request WHERE state = 'result-unknown' AND receipt_queries < :q"
                " LIMIT :n",
                q=receipt_query_limit,
            ),
        )
