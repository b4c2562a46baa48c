"""kefu's Wangwang transport: a shop's Qianniu bridge speaking docs/wangwang-gateway.md.

Inbound: long polls of `messages.get` after the committed cursor. Each answer is one page
(the buyers' messages and the shop's own echoes, which carry kefu's client reference) plus
buyer read events. The bridge is told to forget a page (`messages.confirm`) only after its
cursor is committed, so a crash in between replays the page, and ingestion drops what it has.

Outbound: `message.send` with kefu's request id as the bridge's idempotency key, and
`send.get` to learn what became of a send whose answer was lost.

A buyer's image is paged as a `media_id`; `media.get` hands it out (transports.wangwang.media).
"""

from __future__ import annotations

import base64
import hashlib
from collections import deque
from collections.abc import Callable

from runtime.errors import KefuError
from runtime.inbound.pages import (
    ConversationGroup,
    ConversationType,
    ImageContent,
    InboundMessage,
    InboundPage,
    Sender,
    TextContent,
    UnsupportedContent,
    platform_time,
)
from runtime.ports import (
    BuyerReadReceipt,
    Heartbeat,
    ListenerFailure,
    MediaFetchFailure,
    NeverReceived,
    OutboundSend,
    Received,
    SendFailure,
    SendLookup,
    SendReceipt,
)
from transports.wangwang.client import GatewayClient, GatewayFailure
from transports.wangwang.credentials import WangwangCredentials
from transports.wangwang.media import fetch_media
from transports.wangwang.protocol import Confirmed, GatewayMessage, Identity, MessagesPage, Sent
from transports.wangwang.protocol import SendLookup as SendGetAnswer

STREAM_ID = "wangwang-gateway"
LONG_POLL_S = 20
PAGE_LIMIT = 50
RETRYABLE = ("THROTTLED", "SELLER_OFFLINE", "TIMESTAMP_OUT_OF_RANGE")

Credentials = Callable[[str], WangwangCredentials]


def _content(message: GatewayMessage) -> TextContent | ImageContent | UnsupportedContent:
    if message.content_type == "text" and message.text is not None:
        return TextContent(text=message.text)
    if message.content_type == "image" and message.media_id:
        return ImageContent(ref=message.media_id)
    return UnsupportedContent(platform_type=message.content_type)


def page_op_id(cursor_before: str | None, cursor_after: str) -> str:
    """Stable for the same page served again, and revealing neither cursor (they stay private)."""
    digest = hashlib.sha256(f"{cursor_before or ''}\n{cursor_after}".encode()).hexdigest()
    return f"ww-{digest[:32]}"


def _to_page(account_id: str, cursor_before: str | None, page: MessagesPage) -> InboundPage | None:
    """The messages of one answer as a page (None when it has none)."""
    if not page.messages or not page.next_cursor:
        return None
    grouped: dict[str, list[InboundMessage]] = {}
    types: dict[str, ConversationType] = {}
    for m in page.messages:
        inbound = InboundMessage(
            platform_message_id=m.message_id,
            sender=Sender(
                id=m.sender_id,
                display_name=m.sender_nick,
                role="buyer" if m.sender_role == "buyer" else "native_operator",
            ),
            content=_content(m),
            occurred_at=platform_time(m.sent_at, "sent_at"),
            direct_peer_id=m.sender_id if m.conversation_type == "direct" and m.sender_role == "buyer" else None,
            outbound_ref=m.client_ref,
        )
        grouped.setdefault(m.conversation_id, []).append(inbound)
        types.setdefault(m.conversation_id, m.conversation_type)
    groups = [
        ConversationGroup(conversation_id=c, conversation_type=types[c], messages=messages)
        for c, messages in grouped.items()
    ]
    return InboundPage(
        account_id=account_id,
        stream_id=STREAM_ID,
        cursor=page.next_cursor,
        page_op_id=page_op_id(cursor_before, page.next_cursor),
        groups=groups,
    )


def _to_receipts(account_id: str, page: MessagesPage) -> list[BuyerReadReceipt]:
    return [
        BuyerReadReceipt(
            account_id=account_id,
            conversation_id=read.conversation_id,
            platform_message_id=read.message_id,
            reader_id=read.reader_id,
            read_at=platform_time(read.read_at, "read_at"),
        )
        for read in page.reads
    ]


class WangwangTransport:
    platform = "wangwang"
    stream_id = STREAM_ID

    def __init__(
        self,
        credentials: Credentials,
        timeout_s: float = 10.0,
        client: GatewayClient | None = None,
        media_hosts: tuple[str, ...] = (),
        plain_http_hosts: tuple[str, ...] = (),
    ) -> None:
        self._credentials = credentials
        self.client = client or GatewayClient(timeout_s, plain_http_hosts=plain_http_hosts)
        self.media_hosts = media_hosts  # where a bridge's download may be besides the bridge (fetch_media)

    # -- inbound ---------------------------------------------------------------------------

    def fetch(self, account_id: str, cursor: str | None, wait_s: int = 0) -> MessagesPage:
        params = {"limit": str(PAGE_LIMIT), "wait_s": str(wait_s)} | ({"cursor": cursor} if cursor else {})
        return self.client.call(
            self._credentials(account_id), "kefu.wangwang.messages.get", params, MessagesPage, timeout_s=wait_s + 10
        )

    def page_after(self, account_id: str, cursor: str | None) -> InboundPage | None:
        return _to_page(account_id, cursor, self.fetch(account_id, cursor))

    def confirm(self, account_id: str, cursor: str) -> None:
        """The page up to `cursor` is committed: the bridge may forget it."""
        self.client.call(self._credentials(account_id), "kefu.wangwang.messages.confirm", {"cursor": cursor}, Confirmed)

    def connect(self, account_id: str, cursor: str | None) -> PollingConnection:
        try:
            self.check_identity(self._credentials(account_id))
        except GatewayFailure as failure:
            raise ListenerFailure(failure.kefu_code, authorization=failure.authorization) from None
        return PollingConnection(self, account_id, cursor)

    def close(self) -> None:
        self.client.close()

    def check_identity(self, credentials: WangwangCredentials) -> Identity:
        """The bridge must accept the credentials and serve this very seller."""
        identity = self.client.call(credentials, "kefu.wangwang.identity.get", {}, Identity)
        if identity.seller_id != credentials.seller_id:
            raise GatewayFailure("refused", "UNKNOWN_SELLER")
        return identity

    def fetch_media(self, account_id: str, ref: str, max_bytes: int) -> bytes:
        """A buyer's media item by the `media_id` its message was paged with (MediaDownloads)."""
        try:
            credentials = self._credentials(account_id)
        except KefuError as error:  # e.g. the account's credentials are gone: maybe renewed soon
            raise MediaFetchFailure(error.code, transient=True) from None
        return fetch_media(self.client, credentials, ref, max_bytes, self.media_hosts)

    # -- outbound --------------------------------------------------------------------------

    def send(self, message: OutboundSend) -> SendReceipt:
        params = {"client_ref": message.request_id, "conversation_id": message.conversation_id, "text": message.text}
        if message.recipient_id:
            params["to_id"] = message.recipient_id
        if message.media is not None:
            params |= {"content_type": message.media.kind, "media": base64.b64encode(message.media.data).decode()}
        else:
            params["content_type"] = "text"
        try:
            sent = self.client.call(self._credentials(message.account_id), "kefu.wangwang.message.send", params, Sent)
        except GatewayFailure as failure:
            raise _send_failure(failure) from None
        return SendReceipt(platform_message_id=sent.message_id)

    def query_send(self, account_id: str, request_id: str) -> SendLookup:
        """`found: false` is the bridge's word that it never sent anything under the reference."""
        lookup = self.client.call(
            self._credentials(account_id), "kefu.wangwang.send.get", {"client_ref": request_id}, SendGetAnswer
        )
        if not lookup.found:
            return NeverReceived()
        return SendReceipt(platform_message_id=lookup.message_id) if lookup.message_id else None


def _send_failure(failure: GatewayFailure) -> SendFailure:
    code = failure.kefu_code
    if failure.stage == "not-sent":
        return SendFailure("not-submitted", code)
    if failure.stage == "no-answer" or failure.code == "INTERNAL_ERROR":
        return SendFailure("unknown", code)
    if failure.code in RETRYABLE:
        return SendFailure("not-submitted", code, failure.retry_after_s)
    return SendFailure("rejected", code)


class PollingConnection:
    """Long polls from the committed cursor on; every answer is a heartbeat."""

    def __init__(self, transport: WangwangTransport, account_id: str, cursor: str | None) -> None:
        self._transport = transport
        self._account_id = account_id
        self._cursor = cursor
        self._ready: deque[Received] = deque()
        self._closed = False

    def receive(self, timeout_s: float) -> Received | Heartbeat | None:
        if self._closed:
            raise ListenerFailure("WANGWANG_CONNECTION_CLOSED")
        if self._ready:
            return self._ready.popleft()
        try:
            wait_s = max(1, min(LONG_POLL_S, round(timeout_s)))  # short enough to notice a close soon
            answer = self._transport.fetch(self._account_id, self._cursor, wait_s=wait_s)
        except GatewayFailure as failure:
            raise ListenerFailure(failure.kefu_code, authorization=failure.authorization) from None
        page = _to_page(self._account_id, self._cursor, answer)
        self._ready.extend(Received(receipt) for receipt in _to_receipts(self._account_id, answer))
        if page is not None:
            self._cursor = page.cursor
            self._ready.appendleft(Received(page))
        return self._ready.popleft() if self._ready else Heartbeat()

    def close(self) -> None:
        self._closed = True
