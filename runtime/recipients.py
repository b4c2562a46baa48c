"""Who a direct reply goes to (SPEC 3.8).

Wangwang addresses a buyer, never a conversation: the recipient is the last external sender
observed in the conversation's stored history, else the platform peer stored with it. With
neither, nothing is sent and the caller gets WANGWANG_DIRECT_RECIPIENT_UNAVAILABLE.
"""

from __future__ import annotations

from runtime.errors import CustomerUnknown, KefuError
from runtime.store.connection import Connection
from runtime.store.sql import sql

WANGWANG_RECIPIENT_HELP = (
    "no counterpart sender or platform peer identity is stored for this Wangwang conversation, so nothing"
    " was sent. Wait for a new conversation event. Do not use the conversation id as the recipient."
)


class RecipientUnavailable(KefuError):
    def __init__(self, conversation_id: str) -> None:
        super().__init__(
            "WANGWANG_DIRECT_RECIPIENT_UNAVAILABLE",
            f"conversation {conversation_id!r}: {WANGWANG_RECIPIENT_HELP}",
        )


# What `recipient_of` decides from, as columns over a customer `c` joined with its account `a`.
RECIPIENT_COLUMNS = (
    "c.conversation_type, c.conversation_id, c.direct_peer_id, a.platform,"
    " (SELECT sender_id FROM inbound_message m WHERE m.customer_id = c.id AND m.sender_role = 'external'"
    "  ORDER BY m.id DESC LIMIT 1)"
)
RecipientFacts = tuple[str, str, str | None, str, str | None]  # RECIPIENT_COLUMNS, as read


def direct_recipient(conn: Connection, customer_id: int) -> str | None:
    """The recipient of a reply to this customer; None for a group (it is addressed by conversation).

    Raises RecipientUnavailable for a Wangwang direct conversation with no buyer identity yet.
    """
    row = conn.execute(
        sql(f"SELECT {RECIPIENT_COLUMNS} FROM customer c JOIN account a ON a.id = c.account_id WHERE c.id = :c"),
        {"c": customer_id},
    ).first()
    if row is None:
        raise CustomerUnknown(customer_id)
    return recipient_of(tuple(row))


def recipient_of(facts: RecipientFacts) -> str | None:
    conversation_type, conversation_id, peer, platform, last_external = facts
    if conversation_type != "direct":
        return None
    recipient: str | None = last_external or peer
    if recipient is None and platform == "wangwang":
        raise RecipientUnavailable(conversation_id)
    return recipient
