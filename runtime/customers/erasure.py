"""Erasing one buyer on request: every trace of the conversation, in every store, and an audit
tombstone that says who erased whom and when, never what was said.

What goes: the customer's rows in the delivery store (its messages, batches, replies with their
attempts, read receipts and read checks, alerts, reader watermarks, damaged-session records,
operators' notes on it, its writer lease), the conversation's part of the received and held
pages kept for replay, its words in the search index (whose segments are merged, so no piece is
left in an older one), the media only its replies used, the free text of operator actions about
it (who did what stays), its session logs (damaged copies included), its memory scope and its
memory images.

What stays: the tombstone, with a hash of the conversation id and the platform time of the
newest erased message, so that a platform redelivering an erased message (a reconnect, a page
still in the broker) never stores it again, while the buyer's next message starts a new customer;
and the page receipts, which hold ids only and keep a page from being ingested twice.

Order: the rows and the tombstone in one transaction; then the files. Erasing again after a
crash between them finds the tombstone and finishes the files, so erasure is idempotent. It
refuses while the agent or the memory engine holds the customer's writer lease, or a reply is
being sent (its outcome comes first); after the transaction nothing can write for the customer
again: its rows are gone, and a holder that lost its lease writes nothing. Deleted content is
overwritten in the database files (`secure_delete`) and the write-ahead log checkpointed, so the
words are not left behind in free pages. A checkpoint that readers keep from finishing is tried a
few times; if it still cannot finish, the report says so (`wal_pending`): the old pages leave the
log at the next checkpoint, and erasing again tries once more.
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from runtime.customers.files import drop_files, image_files, leftover_files, session_files
from runtime.errors import CustomerUnknown, KefuError
from runtime.inbound.pages import ConversationGroup, InboundPage
from runtime.memory.engine import scope_of
from runtime.memory.store import MemoryStore
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection
from runtime.store.leases import Fence, LeaseBusy, new_owner
from runtime.store.tables import Erasure


class ErasureCounts(BaseModel):
    """What an erasure removes (a dry run: would remove), per store."""

    messages: int = 0
    replies: int = 0  # outbox requests, their attempts with them
    batches: int = 0
    alerts: int = 0
    pages: int = 0  # received or held pages the conversation's part was cut from
    media: int = 0  # sent images and files no other reply uses
    session_files: int = 0
    memory_folders: int = 0
    memory_images: int = 0


class ErasureReport(BaseModel):
    customer_id: int
    account_id: str
    conversation_type: str
    counts: ErasureCounts
    dry_run: bool
    erased_at: int | None = None  # the tombstone's time (None: a dry run of a customer not erased)
    operator: str | None = None
    # The delivery store's write-ahead log could not be checkpointed (readers kept it busy): it
    # may still hold the erased rows' old pages until its next checkpoint.
    wal_pending: bool = False


log = logging.getLogger(__name__)
CHECKPOINT_TRIES = 5  # of the checkpoint after an erasure, each waiting CHECKPOINT_WAIT_MS for readers
CHECKPOINT_WAIT_MS = 100


def conversation_key(conversation_id: str) -> str:
    return hashlib.sha256(conversation_id.encode()).hexdigest()


def unerased(db: Connection, account_id: str, group: ConversationGroup) -> ConversationGroup | None:
    """Inside ingest's transaction: the group without the messages of an erased conversation
    (a redelivery), None if nothing is left. Messages newer than the erasure are the buyer's new
    conversation and are kept: this never drops input the erasure did not cover."""
    through = db.execute(queries.erasure.THROUGH, (account_id, conversation_key(group.conversation_id))).scalar()
    if through is None:
        return group
    kept = [m for m in group.messages if _ms(m.occurred_at) > through]
    if len(kept) == len(group.messages):
        return group
    return group.model_copy(update={"messages": kept}) if kept else None


def any_erased(db: Connection, account_id: str) -> bool:
    """Anybody of the account was ever erased."""
    return db.execute(queries.erasure.ANY_ERASED, (account_id,)).fetchone() is not None


def without_erased(db: Connection, page: InboundPage, erased: bool | None = None) -> InboundPage:
    """The page without an erased conversation's redelivered messages: what a receiver records
    and ingest stores, so kefu never keeps them again (the page itself, if nothing is erased).
    One indexed lookup for a page of an account nobody was erased from (the usual case), none
    when the caller read `erased` (any_erased, queries.erasure.ANY_ERASED_COLUMN) already."""
    if not (any_erased(db, page.account_id) if erased is None else erased):
        return page
    groups = [unerased(db, page.account_id, group) for group in page.groups]
    if all(kept is group for kept, group in zip(groups, page.groups, strict=True)):
        return page
    return page.model_copy(update={"groups": [group for group in groups if group is not None]})


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


# Children first (foreign keys): what erasing deletes, by table.
_DELETES = (
    queries.read_check.DELETE_OF_CUSTOMER,
    queries.outbox_attempt.DELETE_OF_CUSTOMER,
    queries.buyer_read.DELETE_OF_CUSTOMER,
    queries.alert.DELETE_OF_CUSTOMER,
    queries.outbox_request.DELETE_OF_CUSTOMER,
    queries.reader_watermark.DELETE_OF_CUSTOMER,
    queries.inbound_message.DELETE_OF_CUSTOMER,
    queries.admission_batch.DELETE_OF_CUSTOMER,
    queries.damaged_session.DELETE_OF_CUSTOMER,
    queries.agent_session.DELETE_OF_CUSTOMER,
    queries.pending_question.DELETE_OF_CUSTOMER,
    queries.group_receipt.DELETE_OF_CONVERSATION,
    queries.operator_action.CLEAR_DETAIL_OF_CUSTOMER,
    queries.lease.DELETE_OF_CUSTOMER,
    queries.operator_note.DELETE_OF_CUSTOMER,
    queries.customer.DELETE,
    # The report facts about the customer (runtime.operators.reports); V24's triggers take them
    # out of the summaries as they go.
    queries.reply_wait.DELETE_OF_CUSTOMER,
    queries.report_activity.DELETE_OF_CUSTOMER,
    queries.report_event.DELETE_OF_CUSTOMER,
)
# The kept pages that carry the conversation (received for replay, held by an input pause): how
# to count them, read them (their key columns, then the page) and rewrite one by its key.
_PAGES = (
    (
        queries.received_page.COUNT_CARRYING_CONVERSATION,
        queries.received_page.CARRYING_CONVERSATION,
        queries.received_page.SET_PAGE,
    ),
    (
        queries.held_page.COUNT_CARRYING_CONVERSATION,
        queries.held_page.CARRYING_CONVERSATION,
        queries.held_page.SET_PAGE,
    ),
)


def plan_erasure(
    store: DeliveryStore,
    memory: MemoryStore | None,
    sessions_dir: Path,
    images_dir: Path | None,
    customer_id: int,
) -> ErasureReport:
    """What `erase_customer` would remove, touching nothing. For a customer erased before:
    its tombstone, and whatever of its files an interrupted erasure left."""
    with store.read() as conn:
        found = _customer(conn, customer_id)
        if found is None:
            tombstone = _tombstone(conn, customer_id)
            if tombstone is None:
                raise CustomerUnknown(customer_id)
            return _report(tombstone, _file_counts(memory, sessions_dir, images_dir, customer_id), dry_run=True)
        counts, _ = _row_counts(conn, found)
    counts = _file_counts(memory, sessions_dir, images_dir, customer_id, counts)
    return ErasureReport(
        customer_id=customer_id,
        account_id=found["account_id"],
        conversation_type=found["conversation_type"],
        counts=counts,
        dry_run=True,
    )


def erase_customer(
    store: DeliveryStore,
    memory: MemoryStore | None,
    sessions_dir: Path,
    images_dir: Path | None,
    customer_id: int,
    operator: str,
    lease_s: float = 60.0,
) -> ErasureReport:
    """Erase the customer (see the module). Erasing an erased customer finishes its files and
    returns its tombstone."""
    counts = _file_counts(memory, sessions_dir, images_dir, customer_id)
    with store.write(durable=True) as conn:
        secure = _secure_delete(conn)
        try:
            tombstone = _tombstone(conn, customer_id) or _erase_rows(
                store, conn, customer_id, operator, counts, lease_s
            )
        finally:
            conn.execute(f"PRAGMA secure_delete = {secure}")
    if memory is not None:
        memory.erase_scope(scope_of(customer_id))
    drop_files(memory, sessions_dir, images_dir, [customer_id])
    with store.raw() as db:  # the write-ahead log still holds the pages as they were
        checkpointed = _checkpoint(db)
    if not checkpointed:
        log.warning(
            "erasure of customer %s: the write-ahead log stayed busy; the old pages leave it at its next checkpoint",
            customer_id,
        )
    report = _report(tombstone, ErasureCounts.model_validate_json(tombstone.counts), dry_run=False)
    return report.model_copy(update={"wal_pending": not checkpointed})


def _checkpoint(db: Connection) -> bool:
    """Copy the write-ahead log into the database file and empty it: whether that finished
    (`wal_checkpoint(TRUNCATE)` answers busy while a reader still uses the log), after a few
    brief tries."""
    timeout = int(db.execute("PRAGMA busy_timeout").scalar_one())
    db.execute(f"PRAGMA busy_timeout = {CHECKPOINT_WAIT_MS}")
    try:
        for _ in range(CHECKPOINT_TRIES):
            busy, pages, copied = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").one()
            if not busy and pages == copied:
                return True
    finally:
        db.execute(f"PRAGMA busy_timeout = {timeout}")
    return False


def _erase_rows(
    store: DeliveryStore, conn: Connection, customer_id: int, operator: str, files: ErasureCounts, lease_s: float
) -> Erasure:
    found = _customer(conn, customer_id)
    if found is None:
        raise CustomerUnknown(customer_id)
    lease = Fence(store, f"customer:{customer_id}", new_owner(), token=0, ttl_ms=int(lease_s * 1000))
    try:  # taken, so that no turn or memory job of the customer begins while we erase
        lease.check(conn)
    except LeaseBusy:
        raise _busy(customer_id, "the agent or the memory engine is working on the conversation") from None
    if conn.execute(queries.outbox_request.SENDING_OF_CUSTOMER, {"c": customer_id}).first():
        raise _busy(customer_id, "a reply to the buyer is being sent; its outcome comes first")
    counts, through = _row_counts(conn, found)
    counts = counts.model_copy(update=files.model_dump(include={"session_files", "memory_folders", "memory_images"}))
    params = {"c": customer_id, "a": found["account_id"], "conv": found["conversation_id"]}
    media = list(conn.execute(queries.outbox_request.CUSTOMER_ONLY_MEDIA, params).scalars())
    for statement in _DELETES:
        conn.execute(statement, params)
    for sha256 in media:
        conn.execute(queries.media.DELETE, {"s": sha256})
    conn.execute(queries.message_search.MERGE)
    cut, latest = _cut_pages(conn, found["account_id"], found["conversation_id"])
    tombstone = Erasure(
        erased_customer=customer_id,
        account_id=found["account_id"],
        conversation_key=conversation_key(found["conversation_id"]),
        conversation_type=found["conversation_type"],
        # Retention may have pruned every message already: then the customer's last activity
        # (when kefu last stored input for it) stands in, no earlier than the platform time of
        # anything it stored. Not otherwise: on a simulation's script clock, platform times may
        # be far behind real ones, and the buyer's next message must not be dropped.
        through_ms=max(through, latest) or found["last_activity_at"],
        erased_at=now_ms(),
        operator=operator,
        counts=counts.model_copy(update={"pages": cut}).model_dump_json(),
    )
    conn.execute(queries.erasure.RECORD, tombstone.model_dump())
    return tombstone


def _busy(customer_id: int, why: str) -> KefuError:
    return KefuError(
        "KEFU_ERASE_BUSY", f"customer {customer_id} cannot be erased right now: {why}", "try again in a minute"
    )


def _customer(conn: Connection, customer_id: int) -> dict[str, Any] | None:
    row = conn.execute(queries.customer.CONVERSATION_BY_ID, {"c": customer_id}).mappings().first()
    return dict(row) if row is not None else None


def _tombstone(conn: Connection, customer_id: int) -> Erasure | None:
    row = conn.execute(queries.erasure.TOMBSTONE, {"c": customer_id}).mappings().first()
    return Erasure.model_validate(dict(row)) if row is not None else None


def _row_counts(conn: Connection, customer: dict[str, Any]) -> tuple[ErasureCounts, int]:
    """The customer's rows, and the platform time of its newest stored message."""
    params = {"c": customer["id"], "a": customer["account_id"], "conv": customer["conversation_id"]}
    messages, replies, batches, alerts, through = conn.execute(queries.inbound_message.CUSTOMER_COUNTS, params).one()
    media = len(list(conn.execute(queries.outbox_request.CUSTOMER_ONLY_MEDIA, params).scalars()))
    pages = sum(conn.execute(count, params).scalar_one() for count, _, _ in _PAGES)
    counts = ErasureCounts(messages=messages, replies=replies, batches=batches, alerts=alerts, pages=pages, media=media)
    return counts, int(through)


def _cut_pages(db: Connection, account_id: str, conversation_id: str) -> tuple[int, int]:
    """Cut the conversation's group out of every kept page (received for replay, or held by an
    input pause): how many pages, and the platform time of the newest message cut."""
    cut, latest = 0, 0
    for _, carrying, set_page in _PAGES:
        for *ids, text in db.execute(carrying, {"a": account_id, "conv": conversation_id}).fetchall():
            page = json.loads(text)
            groups = page["groups"]
            for group in groups:
                if group["conversation_id"] == conversation_id:
                    times = (_ms(datetime.fromisoformat(m["occurred_at"])) for m in group["messages"])
                    latest = max(latest, *times)
            page["groups"] = [g for g in groups if g["conversation_id"] != conversation_id]
            db.execute(set_page, (json.dumps(page, ensure_ascii=False, separators=(",", ":")), *ids))
            cut += 1
    return cut, latest


def _file_counts(
    memory: MemoryStore | None,
    sessions_dir: Path,
    images_dir: Path | None,
    customer_id: int,
    counts: ErasureCounts | None = None,
) -> ErasureCounts:
    files = len(session_files(sessions_dir, [customer_id])) + len(leftover_files(sessions_dir, [customer_id]))
    folders = len(memory.folders(scope_of(customer_id))) if memory is not None else 0
    update = {
        "session_files": files,
        "memory_folders": folders,
        "memory_images": len(image_files(images_dir, customer_id)),
    }
    return (counts or ErasureCounts()).model_copy(update=update)


def _report(tombstone: Erasure, counts: ErasureCounts, dry_run: bool) -> ErasureReport:
    return ErasureReport(
        customer_id=tombstone.erased_customer,
        account_id=tombstone.account_id,
        conversation_type=tombstone.conversation_type,
        counts=counts,
        dry_run=dry_run,
        erased_at=tombstone.erased_at,
        operator=tombstone.operator,
    )


def _secure_delete(db: Connection) -> int:
    """Turn on overwriting of deleted content for this connection: the previous setting."""
    previous = int(db.execute("PRAGMA secure_delete").scalar_one())
    db.execute("PRAGMA secure_delete = ON")
    return previous
