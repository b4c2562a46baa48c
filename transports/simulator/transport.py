"""kefu's adapter for the simulated platform: pages out of buyer messages, sends into the ledger."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from itertools import groupby
from typing import Literal

from runtime.inbound.pages import (
    Content,
    ConversationGroup,
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
    MediaTooLarge,
    NeverReceived,
    OutboundSend,
    Received,
    SendFailure,
    SendLookup,
    SendReceipt,
)
from transports.simulator.platform import BuyerMessage, InstanceStopped, ReceivedSend, SimulatedPlatform

STREAM_ID = "simulator"
ECHO_STREAM_ID = "simulator-echo"  # the platform's echoes of the shop's own sends


def platform_message_id(seq: int) -> str:
    return f"sim-{seq}"


class SimulatorTransport:
    platform = "simulator"
    stream_id = STREAM_ID

    def __init__(
        self,
        platform: SimulatedPlatform,
        send_latency_ms: int = 0,
        page_size: int = 100,
        send_timeouts: str = "none",
        send_throttled: bool = False,
        echoes: bool = False,
    ) -> None:
        self.far_side = platform
        self.send_latency_ms = send_latency_ms
        self.page_size = page_size
        self.send_timeouts = send_timeouts  # none | after-submit | before-submit
        self.send_throttled = send_throttled
        self.echoes = echoes  # the listener pages the platform's echo of each send, as Wangwang does

    def page_of(self, account_id: str, messages: list[BuyerMessage]) -> InboundPage:
        """A page holding exactly these buyer messages, its cursor after the last one."""
        ordered = sorted(messages, key=lambda m: (m.conversation_id, m.seq))
        groups = [
            ConversationGroup(
                conversation_id=conversation_id,
                conversation_type=items[0].conversation_type,
                title=items[0].group_title,
                messages=[message for m in items for message in _inbound(m)],
            )
            for conversation_id, items in ((k, list(g)) for k, g in groupby(ordered, key=lambda m: m.conversation_id))
        ]
        first, last = min(m.seq for m in messages), max(m.seq for m in messages)
        return InboundPage(
            account_id=account_id,
            stream_id=self.stream_id,
            cursor=str(last),
            page_op_id=f"sim-page-{first}-{last}",
            groups=groups,
        )

    def page_after(self, account_id: str, cursor: str | None) -> InboundPage | None:
        messages = self.far_side.buyer_messages(account_id, int(cursor or 0), self.page_size)
        return self.page_of(account_id, messages) if messages else None

    def connect(self, account_id: str, cursor: str | None) -> SimulatorConnection:
        return SimulatorConnection(self, account_id, cursor)

    def fetch_media(self, account_id: str, ref: str, max_bytes: int) -> bytes:
        """A buyer's media by the id it was paged with (`media_ref`)."""
        seq = ref.removeprefix("sim-media-")
        media = self.far_side.media_of(int(seq)) if seq.isdigit() and ref != seq else None
        if media is None:
            raise MediaFetchFailure("SIMULATOR_MEDIA_UNKNOWN", transient=False)
        if len(media.data) > max_bytes:
            raise MediaTooLarge(len(media.data))
        return media.data

    def echo_page(self, account_id: str, received: ReceivedSend) -> InboundPage:
        """The platform's echo of a send it received, as the shop side's message carrying the
        client reference (kefu's request id) the send was made with."""
        echo = InboundMessage(
            platform_message_id=received.platform_message_id,
            sender=Sender(id=f"shop:{account_id}", role="native_operator"),
            content=TextContent(text=received.text),
            occurred_at=platform_time(received.received_at, "occurred_at"),
            outbound_ref=received.client_ref,
        )
        kind: Literal["direct", "group"] = "group" if self.far_side.is_group(received.conversation_id) else "direct"
        group = ConversationGroup(conversation_id=received.conversation_id, conversation_type=kind, messages=[echo])
        return InboundPage(
            account_id=account_id,
            stream_id=ECHO_STREAM_ID,
            cursor=str(received.id),
            page_op_id=f"sim-echo-{received.id}",
            groups=[group],
        )

    def read_receipt(self, account_id: str, received: ReceivedSend, read_at_ms: int | None = None) -> BuyerReadReceipt:
        """The platform's report that the buyer read a message it received from the shop."""
        at = datetime.fromtimestamp(read_at_ms / 1000, tz=UTC) if read_at_ms is not None else datetime.now(tz=UTC)
        return BuyerReadReceipt(
            account_id=account_id,
            conversation_id=received.conversation_id,
            platform_message_id=received.platform_message_id,
            reader_id=received.recipient_id or "",
            read_at=at,
        )

    def send(self, message: OutboundSend) -> SendReceipt:
        if not message.recipient_id and not self.far_side.is_group(message.conversation_id):
            raise SendFailure("rejected", "SIMULATOR_RECIPIENT_UNAVAILABLE")
        if self.send_throttled:
            raise SendFailure("not-submitted", "SIMULATOR_THROTTLED", retry_after_s=1.0)
        if self.send_timeouts == "before-submit":
            raise TimeoutError("the simulated send timed out before reaching the platform")
        try:
            received = self.far_side.receive_send(
                message.account_id,
                message.conversation_id,
                message.recipient_id,
                message.text,
                message.request_id,
                kind=message.media.kind if message.media else "text",
                media=message.media.data if message.media else None,
            )
        except InstanceStopped as stopped:  # a stopping simulation instance's buyer receives nothing
            raise SendFailure("rejected", stopped.code) from None
        # The platform has the message; only its response is still on the wire.
        if self.send_latency_ms:
            time.sleep(self.send_latency_ms / 1000)
        if self.send_timeouts == "after-submit":
            raise TimeoutError("the simulated platform's response was lost")
        return SendReceipt(platform_message_id=received.platform_message_id)

    def confirm(self, account_id: str, cursor: str) -> None:
        return None  # the simulated platform keeps everything

    def close(self) -> None:
        return None

    def query_send(self, account_id: str, request_id: str) -> SendLookup:
        """The platform's ledger is complete: a request it has no entry for never arrived."""
        received = self.far_side.received_by_ref(request_id)
        return SendReceipt(platform_message_id=received.platform_message_id) if received else NeverReceived()


def _inbound(message: BuyerMessage) -> list[InboundMessage]:
    """A buyer message as the platform pages it: its media (an image by the platform's media id;
    a file as a type kefu does not read yet), then a caption beside media as a message of its
    own, as DingTalk and Wangwang deliver them."""

    def part(suffix: str, content: Content) -> InboundMessage:
        return InboundMessage(
            platform_message_id=platform_message_id(message.seq) + suffix,
            sender=Sender(id=message.buyer_id, display_name=message.buyer_name, role="buyer"),
            content=content,
            occurred_at=platform_time(message.occurred_at, "occurred_at"),
            mention=message.mention,
            direct_peer_id=message.buyer_id if message.conversation_type == "direct" else None,
        )

    if message.media_kind is None:
        return [part("", TextContent(text=message.text))]
    media: Content = (
        ImageContent(ref=media_ref(message.seq))
        if message.media_kind == "image"
        else UnsupportedContent(platform_type=message.media_kind)
    )
    return [part("", media), *([part("-caption", TextContent(text=message.text))] if message.text else [])]


def message_ids(message: BuyerMessage) -> list[str]:
    """The platform message ids one buyer message is paged as (media, then its caption)."""
    return [part.platform_message_id for part in _inbound(message)]


def media_ref(seq: int) -> str:
    """The platform's id for a buyer message's media (`SimulatedPlatform.media_of(seq)` has it)."""
    return f"sim-media-{seq}"


class SimulatorConnection:
    """A listening connection to the simulated platform: it polls the buyers' messages after
    the last page it delivered (starting at the committed cursor), like a long poll; then, with
    echoes on, the platform's echoes of the shop's sends; then the buyers' read receipts. Those
    two start over on each connection (kefu takes each once, whatever the repeats)."""

    poll_s = 0.05

    def __init__(self, transport: SimulatorTransport, account_id: str, cursor: str | None) -> None:
        self._transport = transport
        self._account_id = account_id
        self._after = cursor
        self._echoes_after = 0
        self._reads_after = 0
        self._closed = threading.Event()

    def receive(self, timeout_s: float) -> Received | Heartbeat | None:
        if self._closed.is_set():
            raise ListenerFailure("SIMULATOR_CONNECTION_CLOSED")
        page = self._transport.page_after(self._account_id, self._after)
        if page is not None:
            self._after = page.cursor
            return Received(page)
        far_side, account = self._transport.far_side, self._account_id
        if self._transport.echoes and (sent := far_side.received(account, self._echoes_after, limit=1)):
            self._echoes_after = sent[0].id
            return Received(self._transport.echo_page(account, sent[0]))
        for read_id, received, read_at in far_side.reads_after(account, self._reads_after, 1):
            self._reads_after = read_id
            return Received(self._transport.read_receipt(account, received, read_at))
        self._closed.wait(min(timeout_s, self.poll_s))
        return Heartbeat()

    def close(self) -> None:
        self._closed.set()
