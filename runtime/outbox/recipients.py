"""Who a direct reply goes to (SPEC 3.8).

Wangwang addresses a buyer, never a conversation: the recipient is the last external sender
observed in the conversation's stored history, else the platform peer stored with it: the one
the platform paged with the conversation, else the `peer_id` of the conversation's specific
direct route (how a shop writes first to a buyer who has not written yet,
runtime.outbox.first_contact). With neither, nothing is sent and the caller gets
WANGWANG_DIRECT_RECIPIENT_UNAVAILABLE.

DingTalk's rule is `dingtalk_recipient`: a 1:1 reply goes through batchSend, whose userIds are
staff ids (userid) only, so the recipient is the buyer's staff id: the peer of the latest stored
message of the conversation that had a senderStaffId. A user outside the organisation has no
staff id (only an encrypted senderId, which batchSend refuses), so the reply goes instead to the
conversation's latest session webhook that has not expired (recipient REPLY_WEBHOOK; the URL is
read when the attempt begins, `reply_webhook`). With neither, nothing is sent and the caller
gets DINGTALK_RECIPIENT_UNAVAILABLE.

A session webhook is kept with the stored message it came with, in the row's `reply_webhook`
column as JSON (`kept_webhook`). Its URL is a credential: no repr, log line, error or recipient
ever shows it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from runtime.errors import CustomerUnknown, KefuError
from runtime.inbound.pages import ReplyWebhook
from runtime.store import now_ms, queries
from runtime.store.connection import Connection

WANGWANG_DIRECT_RECIPIENT_UNAVAILABLE = "WANGWANG_DIRECT_RECIPIENT_UNAVAILABLE"
DINGTALK_RECIPIENT_UNAVAILABLE = "DINGTALK_RECIPIENT_UNAVAILABLE"
_WANGWANG_HELP = (
    "no counterpart sender or platform peer identity is stored for this Wangwang conversation, so nothing"
    " was sent. Wait for a new conversation event. Do not use the conversation id as the recipient."
)
_DINGTALK_HELP = (
    "the buyer has no DingTalk staff id (a user outside the organisation) and the conversation's session"
    " webhook has expired or was never received, so nothing was sent. Wait for the buyer's next message,"
    " which brings a new session webhook. Do not use the conversation id as the recipient."
)
# The recipient of a DingTalk reply that goes to the conversation's session webhook. Never a
# staff id: batchSend is never asked to send to it, and no read status exists for such a send.
REPLY_WEBHOOK = "@session-webhook"
# A session webhook this close to its expiry counts as expired: the post must arrive in time.
REPLY_WEBHOOK_MARGIN_MS = 30_000


class RecipientUnavailable(KefuError):
    def __init__(
        self, conversation_id: str, code: str = WANGWANG_DIRECT_RECIPIENT_UNAVAILABLE, help_text: str = _WANGWANG_HELP
    ) -> None:
        self.help_text = help_text  # what the agent's tool says after `Error: IM reply failed (CODE id):`
        super().__init__(code, f"conversation {conversation_id!r}: {help_text}")


# What `recipient_of` decides from, as queries.customer.RECIPIENT_FACTS reads it (the webhook is
# looked up only for a DingTalk direct conversation without a staff id).
RecipientFacts = tuple[str, str, str | None, str, str | None, str | None]


def direct_recipient(conn: Connection, customer_id: int) -> str | None:
    """The recipient of a reply to this customer; None for a group (it is addressed by conversation).

    Raises RecipientUnavailable for a direct conversation no reply can reach yet (Wangwang with no
    buyer identity; DingTalk with no staff id and no live session webhook).
    """
    row = conn.execute(queries.customer.RECIPIENT_FACTS, {"c": customer_id}).first()
    if row is None:
        raise CustomerUnknown(customer_id)
    return recipient_of(tuple(row))


def recipient_of(facts: RecipientFacts, now: int | None = None) -> str | None:
    """`now` (ms): when a session webhook must still be valid (default: now). `facts`' peer is
    the stored platform peer: the conversation's, else its specific direct route's."""
    conversation_type, conversation_id, peer, platform, last_external, webhook = facts
    if conversation_type != "direct":
        return None
    if platform == "dingtalk":
        return dingtalk_recipient(conversation_id, peer, webhook, now_ms() if now is None else now)
    recipient: str | None = last_external or peer
    if recipient is None and platform == "wangwang":
        raise RecipientUnavailable(conversation_id)
    return recipient


def dingtalk_recipient(conversation_id: str, peer: str | None, stored_webhook: str | None, now: int) -> str:
    """DingTalk's 1:1 rule: the buyer's staff id (`peer`: what the latest message with a
    senderStaffId left on the customer), else REPLY_WEBHOOK while the conversation's latest
    session webhook (`stored_webhook`, as kept) is valid at `now`, else RecipientUnavailable."""
    if peer is not None and is_staff_id(peer):
        return peer
    if live_webhook(stored_webhook, now) is not None:
        return REPLY_WEBHOOK
    raise RecipientUnavailable(conversation_id, DINGTALK_RECIPIENT_UNAVAILABLE, _DINGTALK_HELP)


def is_staff_id(peer: str) -> bool:
    """Not an encrypted senderId (`$:LWCP_v1:$…`), which kefu stored as the peer before this rule."""
    return not peer.startswith("$:")


def kept_webhook(hook: ReplyWebhook | None) -> str | None:
    """A message's reply webhook as its row keeps it (JSON), or None."""
    if hook is None:
        return None
    return json.dumps({"reply_webhook": hook.url, "expires_at": int(hook.expires_at.timestamp() * 1000)})


def live_webhook(stored: str | None, now: int) -> ReplyWebhook | None:
    """A kept session webhook (`kept_webhook`'s JSON) that is still valid at `now` (ms), with a margin."""
    if stored is None:
        return None
    try:
        kept = json.loads(stored)
        expires_at = int(kept["expires_at"])
        if expires_at - REPLY_WEBHOOK_MARGIN_MS <= now:
            return None
        return ReplyWebhook(url=kept["reply_webhook"], expires_at=datetime.fromtimestamp(expires_at / 1000, tz=UTC))
    except (ValueError, KeyError, TypeError):  # never written so: no webhook
        return None


def reply_webhook(conn: Connection, customer_id: int, now: int) -> ReplyWebhook | None:
    """The customer's latest session webhook, if it is still valid at `now` (ms): what a reply
    to REPLY_WEBHOOK is posted to, read when its attempt begins."""
    stored = conn.execute(queries.inbound_message.LATEST_WEBHOOK, {"c": customer_id}).scalar_one_or_none()
    return live_webhook(stored, now)
