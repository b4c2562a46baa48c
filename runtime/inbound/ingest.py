"""Durable ingestion of inbound pages (SPEC 3.3).

A page commits in one transaction: every conversation group's messages, then the page receipt,
the page's received record marked ingested and the provider cursor (which follows the receive
order, runtime.inbound.inbox), and, in a worker, the admission of each customer it touched. SPEC 3.3
has each group in its own transaction with a group receipt, the cursor committed once every
receipt exists; one transaction for the page keeps every guarantee of that (a page is committed
whole or not at all, a crash leaves the old cursor, the cursor never passes a message that was
not committed, a replay writes nothing twice: messages dedupe on account, conversation and
platform message id) at about half the cost per page, and makes group receipts needless. A
page an earlier version committed partway (group receipts without a page receipt, which
runtime.inbound.input_pause counts) is completed by its replay.

This is the hottest write path, so it runs plain SQL on the transaction's DBAPI connection.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from runtime.admission.batches import Known, decide
from runtime.customers.erasure import ANY_ERASED_COLUMN, without_erased
from runtime.errors import KefuError
from runtime.inbound.classification import evidence_role, role_sql
from runtime.inbound.inbox import advance_cursor, mark_ingested
from runtime.inbound.input_pause import PAUSED_OR_HELD_COLUMNS, held_unless_paused, release_held
from runtime.inbound.media import PENDING as PENDING_IMAGE
from runtime.inbound.media import inline_images
from runtime.inbound.pages import ConversationGroup, InboundMessage, InboundPage
from runtime.outbox.recipients import kept_webhook
from runtime.outbox.requests import PLACEHOLDER_WAITING, adopt_console_echoes, settle_by_echo
from runtime.store import DeliveryStore, now_ms
from runtime.store.tables import Account, Customer

_OPEN_BATCH = (
    "SELECT id FROM admission_batch WHERE customer_id = customer.id AND state IN ('claimed', 'committed')"
    " ORDER BY created_at LIMIT 1"
)
_UPSERT_CUSTOMER = (
    "INSERT INTO customer (id, account_id, conversation_id, conversation_type, title, direct_peer_id,"
    " last_activity_at) VALUES (coalesce((SELECT last FROM customer_id_high WHERE base = :base), :base) + 1,"
    " :account_id, :conversation_id, :conversation_type, :title, :peer, :at)"
    " ON CONFLICT (account_id, conversation_id) DO UPDATE SET"
    " last_activity_at = max(last_activity_at, excluded.last_activity_at),"
    " title = coalesce(excluded.title, title),"
    " direct_peer_id = coalesce(excluded.direct_peer_id, direct_peer_id)"
    # The customer's row as admission reads it, its open batch, and whether a manual send's
    # mirror waits for its echo: read in passing, not again.
    f" RETURNING *, ({_OPEN_BATCH}) AS open_batch, {PLACEHOLDER_WAITING} AS placeholder"
)

# Sender classification (runtime.inbound.classification) runs inside the insert. 'ai' rows are never admitted.
# Live input for a customer whose automatic handling is paused is kept but never admitted.
# A duplicate only raises mention evidence to true; everything else stays as first committed.
_INSERT_MESSAGE = (
    "INSERT INTO inbound_message (customer_id, account_id, conversation_id, platform_message_id,"
    " sender_id, sender_name, sender_role, content_type, body, occurred_at, received_at, mention,"
    " direct_peer_id, origin, state, reply_webhook)"
    " SELECT ?1, ?2, ?3, ?4, ?5, ?6, role, ?7, ?8, ?9, ?10, ?11, ?12, ?13,"
    " CASE WHEN ?13 = 'history' THEN 'history' WHEN role = 'ai' THEN 'ignored'"
    "  WHEN ?15 THEN 'suppressed' ELSE 'pending' END, ?16"
    f" FROM (SELECT {role_sql('?2', '?4', '?14')} AS role) WHERE true"
    " ON CONFLICT (account_id, conversation_id, platform_message_id) DO UPDATE SET mention = 1"
    " WHERE excluded.mention = 1 AND inbound_message.mention IS NOT 1"
)
# Errors no replay can cure: a page that meets one is refused for good instead of republished.
NEVER_INGESTED = frozenset({"KEFU_ACCOUNT_UNKNOWN"})
_PAGE_RECEIPT = (
    "INSERT OR IGNORE INTO page_receipt (account_id, stream_id, page_op_id, message_count, committed_at)"
    " VALUES (?, ?, ?, ?, ?)"
)
_CUSTOMER_ID = "SELECT id FROM customer WHERE account_id = ? AND conversation_id = ?"


@dataclass
class IngestResult:
    page_op_id: str
    replayed: bool
    rows_written: int = 0
    # Customers of the page's live conversations. Admission looks at each, also on replay: the
    # process that first committed them may have died before asking (admission is idempotent).
    customer_ids: list[int] = field(default_factory=list)
    # With `admit_batch_size`: admission decided in the page's own transaction; the customers
    # whose batch (claimed now, or open already) has a turn to run.
    turns_due: list[int] | None = None
    # Image messages stored now, whose bytes are still to fetch (runtime.inbound.media).
    images: list[int] = field(default_factory=list)


def _stored(message: InboundMessage, conversation_id: str, inline: dict[tuple[str, str], str]) -> tuple[str, str]:
    """(content type, body) as stored: an inline image (runtime.inbound.media) as an image."""
    content = message.content
    if (conversation_id, message.platform_message_id) in inline:
        return "image", inline[conversation_id, message.platform_message_id]
    if content.type in ("text", "markdown"):
        return content.type, content.text
    return content.type, json.dumps(content.model_dump(exclude={"type"}), ensure_ascii=False)


_ACCOUNT_AND_PAUSE = f"SELECT *, {PAUSED_OR_HELD_COLUMNS}, {ANY_ERASED_COLUMN} FROM account WHERE id = :a"


def ingest_page(
    store: DeliveryStore, page: InboundPage, origin: str = "live", admit_batch_size: int | None = None
) -> IngestResult:
    """Persist a validated page. Idempotent: replaying a page changes nothing already committed.
    `admit_batch_size`: admission (runtime.admission.batches.decide) runs for each customer whose input
    the page stored, in the same transaction (a transaction per buyer message fewer)."""
    key = (page.account_id, page.stream_id, page.page_op_id)
    with store.write() as conn:
        db = conn.dbapi
        named = {"a": page.account_id, "s": page.stream_id, "p": page.page_op_id}
        account = _row(db.execute(_ACCOUNT_AND_PAUSE, named))  # validated if admission runs
        if account is None or account["deleted_at"] is not None:
            raise KefuError(
                "KEFU_ACCOUNT_UNKNOWN",
                f"page {page.page_op_id} names account {page.account_id!r}, which does not exist",
                "create the account before its transport publishes pages",
            )
        if not db.execute(_PAGE_RECEIPT, (*key, page.message_count, now_ms())).rowcount:  # committed before
            live = page.groups if origin == "live" else []
            found = [customer_id for group in live if (customer_id := _customer_of(db, page, group))]
            return IngestResult(page.page_op_id, replayed=True, customer_ids=found)
        # Inside the transaction: a pause is never half-applied.
        held = held_unless_paused(page.account_id, bool(account.pop("input_paused")), bool(account.pop("page_held")))
        erased = bool(account.pop("any_erased"))
        result = IngestResult(page.page_op_id, replayed=False)
        touched: dict[int, _Upserted] = {}  # each live customer once, as its last upsert saw it
        rows: list[tuple[Any, ...]] = []
        page = without_erased(db, page, erased)  # the page as recorded as ingested, too
        inline = inline_images(conn, page)
        for group in page.groups:
            upserted, group_rows = _upsert_group(db, page, group, origin, store.customer_id_base, inline)
            rows += group_rows
            if origin == "live":
                touched[upserted.row["id"]] = upserted
        # The page's messages in one statement: each group's echoes were settled above first.
        result.rows_written = max(db.executemany(_INSERT_MESSAGE, rows).rowcount, 0)
        if any(m.content.type == "image" for group in page.groups for m in group.messages):
            result.images = _images_to_fetch(db, page)
        result.customer_ids = list(touched)
        _commit_page(db, page, held)
        if admit_batch_size is not None and touched:
            serving = Account.model_validate(account)
            decisions = ((c, decide(conn, c, admit_batch_size, u.known(serving))) for c, u in touched.items())
            result.turns_due = [c for c, decision in decisions if decision.batch_id is not None]
    return result


def _images_to_fetch(db: sqlite3.Connection, page: InboundPage) -> list[int]:
    keys = [
        (page.account_id, group.conversation_id, m.platform_message_id)
        for group in page.groups
        for m in group.messages
        if m.content.type == "image"
    ]
    query = (
        f"SELECT id FROM inbound_message WHERE {PENDING_IMAGE}"
        " AND account_id = ? AND conversation_id = ? AND platform_message_id = ?"
    )
    return [row[0] for key in keys for row in db.execute(query, key)]


def _row(cursor: sqlite3.Cursor) -> dict[str, Any] | None:
    """The cursor's next row by column name (a plain dict: no model built on the hot path)."""
    values = cursor.fetchone()
    return None if values is None else dict(zip((d[0] for d in cursor.description), values, strict=True))


def _customer_of(db: sqlite3.Connection, page: InboundPage, group: ConversationGroup) -> int | None:
    row = db.execute(_CUSTOMER_ID, (page.account_id, group.conversation_id)).fetchone()
    return row[0] if row else None


@dataclass(frozen=True)
class _Upserted:
    """A customer's row as its upsert returned it, and its open batch: what admission reads."""

    row: dict[str, Any]
    open_batch_id: str | None

    def known(self, account: Account) -> Known:
        return Known(Customer.model_validate(self.row), self.open_batch_id, account, input_paused=False)


def _upsert_group(
    db: sqlite3.Connection,
    page: InboundPage,
    group: ConversationGroup,
    origin: str,
    customer_base: int,
    inline: dict[tuple[str, str], str],
) -> tuple[_Upserted, list[tuple[Any, ...]]]:
    """Inside the page's transaction: the customer as upserted, and the group's message rows to
    insert (messages stored before, by a replay or a page an earlier version committed partway,
    dedupe there)."""
    at = now_ms()
    last_peer = next((m.direct_peer_id for m in reversed(group.messages) if m.direct_peer_id), None)
    upsert = db.execute(
        _UPSERT_CUSTOMER,
        {
            "account_id": page.account_id,
            "conversation_id": group.conversation_id,
            "conversation_type": group.conversation_type,
            "title": group.title,
            "peer": last_peer,
            "at": at,
            "base": customer_base,
        },
    )
    row = _row(upsert)
    assert row is not None  # an upsert returns its row
    open_batch_id, placeholder = row.pop("open_batch"), row.pop("placeholder")
    customer_id, paused = row["id"], row["handling_paused"]
    account, conversation = page.account_id, group.conversation_id
    # Echoes of our own sends: settled first, so the insert below classifies them as ours (a
    # manual send settled so gets its mirror's placeholder now).
    for m in group.messages:
        if m.outbound_ref is not None and settle_by_echo(db, account, m.outbound_ref, m.platform_message_id):
            placeholder = True
    if placeholder:
        adopt_console_echoes(db, account, conversation, [m.platform_message_id for m in group.messages])
    rows = [
        (
            customer_id,
            account,
            conversation,
            m.platform_message_id,
            m.sender.id,
            m.sender.display_name,
            *_stored(m, conversation, inline),
            int(m.occurred_at.timestamp() * 1000),
            at,
            m.mention,
            m.direct_peer_id,
            origin,
            evidence_role(m.sender.role),
            paused,
            kept_webhook(m.reply_webhook),
        )
        for m in group.messages
    ]
    return _Upserted(row, open_batch_id), rows


def _commit_page(db: sqlite3.Connection, page: InboundPage, held: bool) -> None:
    """Inside the transaction that wrote the page receipt and stored the page's groups: the
    received record marked ingested, the cursor, and the page released if a pause held it.

    Not synchronous on disk, though the platform is told the cursor next: the page's received
    record, committed durably before the receiver acknowledged anything, is its durable copy.
    A power loss takes a suffix of the write-ahead log's commits, never a commit without the
    ones before it, so losing this one also loses the mark on the record, and the reconciler
    publishes the page again (ingest is idempotent); any later durable commit, such as an
    attempt begun for a reply to it, puts this one on disk first."""
    mark_ingested(db, page)
    advance_cursor(db, page)
    if held:
        release_held(db, page)


def committed_cursor(store: DeliveryStore, account_id: str, stream_id: str) -> str | None:
    with store.raw() as db:
        row = db.execute(
            "SELECT cursor FROM provider_cursor WHERE account_id = ? AND stream_id = ?", (account_id, stream_id)
        ).fetchone()
    return row[0] if row else None
