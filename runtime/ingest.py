"""Durable ingestion of inbound pages (SPEC 3.3).

Each conversation group commits in its own transaction with a group receipt; the provider
cursor commits with the page receipt only once every group receipt exists. A crash anywhere
leaves the old cursor, and replay is safe because messages dedupe on
(account, conversation, platform message id).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sqlalchemy import Connection, text

from runtime.accounts import load_account
from runtime.errors import KefuError
from runtime.pages import ConversationGroup, InboundMessage, InboundPage
from runtime.store import DeliveryStore, now_ms

_UPSERT_CUSTOMER = text(
    "INSERT INTO customer (account_id, conversation_id, conversation_type, title, direct_peer_id,"
    " last_activity_at) VALUES (:account_id, :conversation_id, :conversation_type, :title, :peer, :at)"
    " ON CONFLICT (account_id, conversation_id) DO UPDATE SET"
    " last_activity_at = max(last_activity_at, excluded.last_activity_at),"
    " title = coalesce(excluded.title, title),"
    " direct_peer_id = coalesce(excluded.direct_peer_id, direct_peer_id)"
    " RETURNING id"
)

# Sender classification happens here, in SQL: an echo of our own sent message is 'ai' (auto)
# or 'human-console' (manual); text equality never matters. 'ai' rows are never admitted.
# A duplicate only raises mention evidence to true; everything else stays as first committed.
_INSERT_MESSAGE = text(
    "INSERT INTO inbound_message (customer_id, account_id, conversation_id, platform_message_id,"
    " sender_id, sender_name, sender_role, content_type, body, occurred_at, received_at, mention,"
    " direct_peer_id, origin, state)"
    " SELECT :customer_id, :account_id, :conversation_id, :pmid, :sender_id, :sender_name, role,"
    " :content_type, :body, :occurred_at, :received_at, :mention, :peer, :origin,"
    " CASE WHEN :origin = 'history' THEN 'history' WHEN role = 'ai' THEN 'ignored' ELSE 'pending' END"
    " FROM (SELECT coalesce((SELECT CASE origin WHEN 'auto' THEN 'ai' ELSE 'human-console' END"
    "   FROM outbox_request WHERE account_id = :account_id AND platform_message_id = :pmid"
    "   AND state = 'sent' LIMIT 1), :evidence_role) AS role) WHERE true"
    " ON CONFLICT (account_id, conversation_id, platform_message_id) DO UPDATE SET mention = 1"
    " WHERE excluded.mention = 1 AND inbound_message.mention IS NOT 1"
)


@dataclass
class IngestResult:
    page_op_id: str
    replayed: bool
    rows_written: int = 0
    # Customers of the page's live conversations. Admission looks at each, also on replay: the
    # process that first committed them may have died before asking (admission is idempotent).
    customer_ids: list[int] = field(default_factory=list)


def _body(message: InboundMessage) -> str:
    content = message.content
    if content.type in ("text", "markdown"):
        return content.text
    return json.dumps(content.model_dump(exclude={"type"}), ensure_ascii=False)


def _evidence_role(message: InboundMessage) -> str:
    return "human-native" if message.sender.role == "native_operator" else "external"


def ingest_page(store: DeliveryStore, page: InboundPage, origin: str = "live") -> IngestResult:
    """Persist a validated page. Idempotent: replaying a page changes nothing already committed."""
    with store.read() as conn:
        account = load_account(conn, page.account_id)
        if account is None:
            raise KefuError(
                "KEFU_ACCOUNT_UNKNOWN",
                f"page {page.page_op_id} names account {page.account_id!r}, which does not exist",
                "create the account before its transport publishes pages",
            )
        if _page_committed(conn, page):
            customers = [] if origin != "live" else [
                customer_id
                for group in page.groups
                if (customer_id := _customer_id(conn, page.account_id, group.conversation_id)) is not None
            ]
            return IngestResult(page.page_op_id, replayed=True, customer_ids=customers)
    result = IngestResult(page.page_op_id, replayed=False)
    for group in page.groups:
        customer_id, written = commit_group(store, page, group, origin)
        result.rows_written += written
        if origin == "live":
            result.customer_ids.append(customer_id)
    commit_cursor(store, page)
    return result


def _customer_id(conn: Connection, account_id: str, conversation_id: str) -> int | None:
    return conn.execute(
        text("SELECT id FROM customer WHERE account_id = :a AND conversation_id = :c"),
        {"a": account_id, "c": conversation_id},
    ).scalar_one_or_none()


def _page_committed(conn: Connection, page: InboundPage) -> bool:
    return (
        conn.execute(
            text("SELECT 1 FROM page_receipt WHERE account_id = :a AND stream_id = :s AND page_op_id = :p"),
            {"a": page.account_id, "s": page.stream_id, "p": page.page_op_id},
        ).first()
        is not None
    )


def commit_group(
    store: DeliveryStore, page: InboundPage, group: ConversationGroup, origin: str
) -> tuple[int, int]:
    """Commit one conversation group with its receipt. Returns (customer id, rows written);
    rows written is 0 when an earlier delivery of this page already committed the group."""
    at = now_ms()
    receipt = {"a": page.account_id, "s": page.stream_id, "p": page.page_op_id, "c": group.conversation_id}
    last_peer = next((m.direct_peer_id for m in reversed(group.messages) if m.direct_peer_id), None)
    with store.write() as conn:
        if conn.execute(
            text(
                "SELECT 1 FROM group_receipt WHERE account_id = :a AND stream_id = :s"
                " AND page_op_id = :p AND conversation_id = :c"
            ),
            receipt,
        ).first():
            return _customer_id(conn, page.account_id, group.conversation_id), 0  # type: ignore[return-value]
        customer_id = conn.execute(
            _UPSERT_CUSTOMER,
            {
                "account_id": page.account_id,
                "conversation_id": group.conversation_id,
                "conversation_type": group.conversation_type,
                "title": group.title,
                "peer": last_peer,
                "at": at,
            },
        ).scalar_one()
        rows = [
            {
                "customer_id": customer_id,
                "account_id": page.account_id,
                "conversation_id": group.conversation_id,
                "pmid": m.platform_message_id,
                "sender_id": m.sender.id,
                "sender_name": m.sender.display_name,
                "evidence_role": _evidence_role(m),
                "content_type": m.content.type,
                "body": _body(m),
                "occurred_at": int(m.occurred_at.timestamp() * 1000),
                "received_at": at,
                "mention": m.mention,
                "peer": m.direct_peer_id,
                "origin": origin,
            }
            for m in group.messages
        ]
        written = conn.execute(_INSERT_MESSAGE, rows).rowcount
        conn.execute(
            text(
                "INSERT INTO group_receipt (account_id, stream_id, page_op_id, conversation_id, committed_at)"
                " VALUES (:a, :s, :p, :c, :at)"
            ),
            {**receipt, "at": at},
        )
    return customer_id, max(written, 0)


def commit_cursor(store: DeliveryStore, page: InboundPage) -> None:
    """Commit the page receipt and provider cursor, only once every group receipt exists."""
    with store.write() as conn:
        if _page_committed(conn, page):
            return
        have = conn.execute(
            text("SELECT count(*) FROM group_receipt WHERE account_id = :a AND stream_id = :s AND page_op_id = :p"),
            {"a": page.account_id, "s": page.stream_id, "p": page.page_op_id},
        ).scalar_one()
        if have != len(page.groups):
            raise KefuError(
                "KEFU_PAGE_INCOMPLETE",
                f"page {page.page_op_id} has {have} of {len(page.groups)} group receipts; cursor not advanced",
                "replay the page; committed groups are skipped",
            )
        at = now_ms()
        conn.execute(
            text(
                "INSERT INTO page_receipt (account_id, stream_id, page_op_id, message_count, committed_at)"
                " VALUES (:a, :s, :p, :n, :at)"
            ),
            {"a": page.account_id, "s": page.stream_id, "p": page.page_op_id, "n": page.message_count, "at": at},
        )
        conn.execute(
            text(
                "INSERT INTO provider_cursor (account_id, stream_id, cursor, page_op_id, updated_at)"
                " VALUES (:a, :s, :cursor, :p, :at) ON CONFLICT (account_id, stream_id) DO UPDATE SET"
                " cursor = excluded.cursor, page_op_id = excluded.page_op_id, updated_at = excluded.updated_at"
            ),
            {"a": page.account_id, "s": page.stream_id, "cursor": page.cursor, "p": page.page_op_id, "at": at},
        )


def committed_cursor(store: DeliveryStore, account_id: str, stream_id: str) -> str | None:
    with store.read() as conn:
        return conn.execute(
            text("SELECT cursor FROM provider_cursor WHERE account_id = :a AND stream_id = :s"),
            {"a": account_id, "s": stream_id},
        ).scalar_one_or_none()
