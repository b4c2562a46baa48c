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

This is the hottest write path: a page is one transaction of named statements (runtime.store.queries).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from config.settings import DEFAULT_PROFILE
from runtime.admission.batches import Known, decide
from runtime.customers.erasure import without_erased
from runtime.errors import KefuError
from runtime.inbound.classification import evidence_role
from runtime.inbound.inbox import advance_cursor, mark_ingested
from runtime.inbound.input_pause import held_unless_paused, release_held
from runtime.inbound.media import FETCHED, inline_images
from runtime.inbound.pages import ConversationGroup, InboundMessage, InboundPage
from runtime.outbox.recipients import kept_webhook
from runtime.outbox.requests import adopt_console_echoes, settle_by_echo
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection
from runtime.store.tables import Account, Customer

# Errors no replay can cure: a page that meets one is refused for good instead of republished.
NEVER_INGESTED = frozenset({"KEFU_ACCOUNT_UNKNOWN"})


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
    # Image, file, voice and video messages stored now, whose bytes are still to fetch
    # (runtime.inbound.media).
    media: list[int] = field(default_factory=list)


def _stored(message: InboundMessage, conversation_id: str, inline: dict[tuple[str, str], str]) -> tuple[str, str]:
    """(content type, body) as stored: an inline image (runtime.inbound.media) as an image."""
    content = message.content
    if (conversation_id, message.platform_message_id) in inline:
        return "image", inline[conversation_id, message.platform_message_id]
    if content.type in ("text", "markdown"):
        return content.type, content.text
    return content.type, json.dumps(content.model_dump(exclude={"type"}), ensure_ascii=False)


def ingest_page(
    store: DeliveryStore,
    page: InboundPage,
    origin: str = "live",
    admit_batch_size: int | None = None,
    profiles: Collection[str] = (DEFAULT_PROFILE,),
) -> IngestResult:
    """Persist a validated page. Idempotent: replaying a page changes nothing already committed.
    `admit_batch_size`: admission (runtime.admission.batches.decide) runs for each customer whose input
    the page stored, in the same transaction (a transaction per buyer message fewer), knowing
    the agent `profiles` configured."""
    key = (page.account_id, page.stream_id, page.page_op_id)
    with store.write() as conn:
        named = {"a": page.account_id, "s": page.stream_id, "p": page.page_op_id}
        account = conn.execute(queries.account.FOR_INGEST, named).mappings().first()  # validated if admission runs
        if account is None or account["deleted_at"] is not None:
            raise KefuError(
                "KEFU_ACCOUNT_UNKNOWN",
                f"page {page.page_op_id} names account {page.account_id!r}, which does not exist",
                "create the account before its transport publishes pages",
            )
        if not conn.execute(queries.page_receipt.RECORD, (*key, page.message_count, now_ms())).rowcount:
            # Committed before.
            live = page.groups if origin == "live" else []
            found = [customer_id for group in live if (customer_id := _customer_of(conn, page, group))]
            return IngestResult(page.page_op_id, replayed=True, customer_ids=found)
        # Inside the transaction: a pause is never half-applied.
        held = held_unless_paused(page.account_id, bool(account.pop("input_paused")), bool(account.pop("page_held")))
        erased = bool(account.pop("any_erased"))
        result = IngestResult(page.page_op_id, replayed=False)
        touched: dict[int, _Upserted] = {}  # each live customer once, as its last upsert saw it
        rows: list[tuple[Any, ...]] = []
        page = without_erased(conn, page, erased)  # the page as recorded as ingested, too
        inline = inline_images(conn, page)
        for group in page.groups:
            upserted, group_rows = _upsert_group(conn, page, group, origin, store.customer_id_base, inline)
            rows += group_rows
            if origin == "live":
                touched[upserted.row["id"]] = upserted
        # The page's messages in one statement: each group's echoes were settled above first.
        result.rows_written = max(conn.executemany(queries.inbound_message.INSERT, rows).rowcount, 0)
        if any(m.content.type in FETCHED for group in page.groups for m in group.messages):
            result.media = _media_to_fetch(conn, page)
        result.customer_ids = list(touched)
        _commit_page(conn, page, held)
        if admit_batch_size is not None and touched:
            serving = Account.model_validate(account)
            decisions = ((c, decide(conn, c, admit_batch_size, u.known(serving), profiles)) for c, u in touched.items())
            result.turns_due = [c for c, decision in decisions if decision.batch_id is not None]
    return result


def _media_to_fetch(db: Connection, page: InboundPage) -> list[int]:
    keys = [
        (page.account_id, group.conversation_id, m.platform_message_id)
        for group in page.groups
        for m in group.messages
        if m.content.type in FETCHED
    ]
    return [row[0] for key in keys for row in db.execute(queries.inbound_message.PENDING_MEDIA_ID, key)]


def _customer_of(db: Connection, page: InboundPage, group: ConversationGroup) -> int | None:
    row = db.execute(queries.customer.BY_CONVERSATION, (page.account_id, group.conversation_id)).fetchone()
    return row[0] if row else None


@dataclass(frozen=True)
class _Upserted:
    """A customer's row as its upsert returned it, and its open batch: what admission reads."""

    row: dict[str, Any]
    open_batch_id: str | None

    def known(self, account: Account) -> Known:
        return Known(Customer.model_validate(self.row), self.open_batch_id, account, input_paused=False)


def _upsert_group(
    db: Connection,
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
        queries.customer.UPSERT_FROM_GROUP,
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
    row = upsert.mappings().first()
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


def _commit_page(db: Connection, page: InboundPage, held: bool) -> None:
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
        row = db.execute(queries.provider_cursor.CURSOR, (account_id, stream_id)).fetchone()
    return row[0] if row else None
