"""Buyer read receipts (SPEC 3.9): a buyer read one of our messages.

A receipt counts only for a message kefu sent and the platform confirmed, in a direct
conversation, read by that conversation's buyer (the send's recipient); anything else is
refused with the reason. It is stored once and kept across restarts. The customer's agent
session learns of it as an `im/message-read` event at its next step; a receipt never starts
a turn of its own (an idle agent is not woken).
"""

from __future__ import annotations

import json
from typing import Literal
from zoneinfo import ZoneInfo

from runtime.agent.rendering import shop_time
from runtime.ports import READ_NOTICE_PREFIX, BuyerReadReceipt
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection
from runtime.store.tables import BuyerRead

Decision = Literal["stored", "already-stored", "unknown-message", "not-direct", "not-the-buyer"]


def accept_buyer_receipt(store: DeliveryStore, receipt: BuyerReadReceipt) -> Decision:
    """Store a verified receipt once. Idempotent: a repeated receipt changes nothing."""
    with store.write() as conn:
        sent = (
            conn.execute(
                queries.outbox_request.SENT_BY_MESSAGE_ID,
                {"a": receipt.account_id, "p": receipt.platform_message_id},
            )
            .mappings()
            .first()
        )
        if sent is None or sent["conversation_id"] != receipt.conversation_id:
            return "unknown-message"
        if sent["conversation_type"] != "direct":
            return "not-direct"
        if sent["recipient_id"] != receipt.reader_id:
            return "not-the-buyer"
        stored = conn.execute(
            queries.buyer_read.RECORD,
            {
                "a": receipt.account_id,
                "p": receipt.platform_message_id,
                "r": sent["request_id"],
                "c": sent["customer_id"],
                "u": receipt.reader_id,
                "at": int(receipt.read_at.timestamp() * 1000),
                "now": now_ms(),
            },
        ).rowcount
    return "stored" if stored else "already-stored"


def reads_from_json(text: str) -> list[BuyerRead]:
    """Reads as queries.customer.UNDELIVERED_READS_JSON gives them (one JSON column)."""
    return [BuyerRead.model_validate(read) for read in json.loads(text)]


def undelivered_reads(conn: Connection, customer_id: int) -> list[BuyerRead]:
    rows = conn.execute(queries.buyer_read.UNDELIVERED, {"c": customer_id}).mappings()
    return [BuyerRead.model_validate(dict(row)) for row in rows]


def mark_delivered(store: DeliveryStore, reads: list[BuyerRead]) -> None:
    with store.write() as conn:
        for read in reads:
            conn.execute(
                queries.buyer_read.MARK_DELIVERED,
                {"now": now_ms(), "a": read.account_id, "p": read.platform_message_id},
            )


def read_notice(read: BuyerRead, zone: ZoneInfo) -> str:
    """The line the model sees."""
    return f"{READ_NOTICE_PREFIX} 顾客已读你发送的消息（请求 {read.request_id}，{shop_time(read.read_at, zone)}）。"
