"""Received pages, kept in SQLite from the moment a receiver has them until ingest commits them
(SPEC 3.3, durability before acknowledgement).

A receiver (a listener, the HTTP callback, the reconciler's catch-up, any code that publishes
pages) records each page here before it ACKs or confirms the platform, and only then publishes
it. Ingest marks the record in the transaction that commits the page's cursor; the reconciler
publishes records still pending after a grace again. So a page the broker loses (a worker
killed in kombu's at-most-once window, a Redis restart) is never gone: the broker is only the
channel.

The record's id is the receive order. The committed provider cursor follows it: it is the
cursor of the newest ingested page that no pending page was received before, so it never moves
backwards and never past a page that was not committed.
"""

from __future__ import annotations

import json
from typing import Any

from runtime.customers.erasure import any_erased, without_erased
from runtime.inbound.pages import InboundPage
from runtime.store import DeliveryStore, immediate, now_ms, queries
from runtime.store.connection import Connection

INGESTED = "ingested"
KEEP_INGESTED_MS = 3_600_000  # ingested records are forgotten after this (their page receipt stays)
REPUBLISH_LIMIT = 500  # per reconciler pass
MAX_DOUBLINGS = 5  # the longest wait before publishing again: 32 graces


class Unchecked:
    """No cursor to check a page against: it did not come from a catch-up fetch."""


UNCHECKED = Unchecked()


def record_received(store: DeliveryStore, page: InboundPage, fetched_after: str | None | Unchecked = UNCHECKED) -> bool:
    """Keep the page until it is ingested. True when it is to be published: it is new, or it is
    still pending (a platform redelivery of a page whose broker message may be lost). False when
    it was committed already (the receiver only ACKs), or when it was fetched after a committed
    cursor (`fetched_after`) that has moved on since: a newer page covers it, and recording it
    would put the cursor back."""
    at = now_ms()
    key = (page.account_id, page.stream_id, page.page_op_id)
    with store.raw() as db, immediate(db, durable=True):  # the receiver ACKs the platform after this
        if not isinstance(fetched_after, Unchecked):
            row = db.execute(queries.provider_cursor.CURSOR, key[:2]).fetchone()
            if (row[0] if row else None) != fetched_after:
                return False
        # Unless it was committed before (its record may be forgotten since); the usual page, of
        # an account nobody was erased from, in this one statement.
        inserted = db.execute(queries.received_page.RECORD_UNLESS_ERASED, (*key, page.model_dump_json(), at)).rowcount
        if not inserted and any_erased(db, page.account_id):  # an erased buyer's redelivered words are never kept
            inserted = db.execute(
                queries.received_page.RECORD, (*key, without_erased(db, page, True).model_dump_json(), at)
            ).rowcount
        if inserted:
            return True
        # Still pending: published again (a committed page's record is marked ingested)
        return bool(db.execute(queries.received_page.REPUBLISH_PENDING, (at, *key)).rowcount)


def mark_ingested(db: Connection, page: InboundPage) -> None:
    """Inside the caller's transaction: the page is done. A page that never went through a
    receiver is recorded here, so its place in the receive order exists."""
    at, key = now_ms(), (page.account_id, page.stream_id, page.page_op_id)
    # The usual case, a received page: its record is there, and no JSON is made
    done = db.execute(queries.received_page.MARK_INGESTED, (INGESTED, at, *key))
    if done.rowcount:
        return
    db.execute(queries.received_page.RECORD_INGESTED, (*key, page.model_dump_json(), at, at, at, INGESTED))


def refuse_page(store: DeliveryStore, account_id: str, stream_id: str, page_op_id: str, code: str) -> None:
    """A recorded page can never be ingested (it does not validate, its account is gone): it
    is done, so it is neither published again nor holding its stream's cursor back."""
    with store.raw() as db, immediate(db):
        db.execute(queries.received_page.REFUSE, (now_ms(), code, account_id, stream_id, page_op_id))


def advance_cursor(db: Connection, page: InboundPage) -> None:
    """Inside the transaction that ingested `page`: move its stream's committed cursor up to the
    newest ingested page that no pending page precedes, never backwards (one statement). That
    is most often `page` itself, whose cursor is at hand: only another page's is read from its JSON."""
    db.execute(
        queries.provider_cursor.ADVANCE,
        (page.account_id, page.stream_id, INGESTED, page.page_op_id, page.cursor, now_ms()),
    )


def overdue_pages(store: DeliveryStore, grace_ms: int) -> list[dict[str, Any]]:
    """Pages still not ingested, published more than a grace ago (doubling with each publish,
    so a backlog in the broker is not multiplied), oldest first, marked as published again.
    Pages held by an input pause wait for the resume instead. Looked for first without the
    write lock: a pass of the reconciler usually finds none."""
    at = now_ms()
    params = {"at": at, "grace": grace_ms, "doublings": MAX_DOUBLINGS, "n": REPUBLISH_LIMIT}
    with store.read() as conn:
        if conn.execute(queries.received_page.OVERDUE, params).first() is None:
            return []
    with store.write() as conn:
        rows = conn.execute(queries.received_page.OVERDUE, params).all()
        conn.execute(
            queries.received_page.MARK_REPUBLISHED,
            {"at": at, "ids": json.dumps([row[0] for row in rows])},
        )
    return [json.loads(row[1]) for row in rows]


def received_not_ingested(conn: Connection, account_id: str) -> int:
    """Messages of the account's pages that were received and are not ingested yet: input a
    checkpoint counts as pending, like stored input not yet answered."""
    messages: int = conn.execute(queries.received_page.PENDING_MESSAGE_COUNT, {"a": account_id}).scalar_one()
    return messages


def prune_ingested(store: DeliveryStore, keep_ms: int = KEEP_INGESTED_MS) -> int:
    """Forget pages ingested long ago: their page receipt answers any later redelivery. Looked
    for first without the write lock: a pass of the reconciler usually finds none."""
    before = {"t": now_ms() - keep_ms}
    with store.read() as conn:
        if conn.execute(queries.received_page.ANY_INGESTED_BEFORE, before).first() is None:
            return 0
    with store.write() as conn:
        return conn.execute(queries.received_page.PRUNE_INGESTED, before).rowcount


def accounts_to_catch_up(conn: Connection) -> list[tuple[str, str]]:
    """(account, platform) of connected accounts to fetch missed pages for. Accounts with
    received pages not yet ingested wait: their cursor moves once those are in."""
    rows = conn.execute(queries.account.TO_CATCH_UP)
    return [(row[0], row[1]) for row in rows]
