"""What the worker needs from a platform transport.

A transport sends, answers receipt queries, pages through history after a committed cursor
(catch-up), and opens listening connections. The worker's listener publishes what a
connection receives: inbound pages to `kefu.ingest.page`, buyer read receipts to
`kefu.receipts.buyer_read`, and only then acknowledges them to the platform.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from runtime.outbox import OutboundSend, SendLookup, SendReceipt
from runtime.pages import InboundPage
from runtime.read_receipts import BuyerReadReceipt


def _nothing_to_ack() -> None:
    return None


@dataclass(frozen=True)
class Received:
    """One thing a connection delivered. `ack` tells the platform it is safe with us: call it
    right after the item is published to the broker (never later: a late ACK means
    redelivery), and never when publishing failed (then the platform must redeliver)."""

    item: InboundPage | BuyerReadReceipt
    ack: Callable[[], None] = field(default=_nothing_to_ack)


@dataclass(frozen=True)
class Heartbeat:
    """The platform's own keepalive (a ping frame, an empty poll): the connection is alive."""


class ListenerConnection(Protocol):
    def receive(self, timeout_s: float) -> Received | Heartbeat | None:
        """The next delivery or keepalive, or None when nothing came within `timeout_s`.
        Raises runtime.listener_policy.ListenerFailure when the connection is lost."""

    def close(self) -> None:
        """Close the connection; may be called from another thread, and more than once.
        Nothing received after closing is ever delivered."""


class Transport(Protocol):
    platform: str
    stream_id: str  # the provider stream whose cursor catch-up reads

    def send(self, message: OutboundSend) -> SendReceipt:
        """Deliver one message (`message.media` set: one file); raise runtime.outbox.SendFailure
        classified by outcome. `message.request_id` is the client reference: pass it to the
        platform where it takes one, and set it as `outbound_ref` on the platform's echo."""

    def query_send(self, account_id: str, request_id: str) -> SendLookup:
        """What became of an earlier send, by its request id: its receipt, NeverReceived when
        the platform can say for sure it never got it, or None when it cannot tell."""

    def page_after(self, account_id: str, cursor: str | None) -> InboundPage | None:
        """The next page of inbound messages after a committed cursor (catch-up), or None."""

    def confirm(self, account_id: str, cursor: str) -> None:
        """The page up to `cursor` is committed: the platform may forget it (where it keeps
        pages until told). Called after the commit, so a crash in between replays the page."""

    def connect(self, account_id: str, cursor: str | None) -> ListenerConnection:
        """Open a listening connection for the account, resuming after the committed cursor
        where the platform has one. Raises runtime.listener_policy.ListenerFailure."""

    def close(self) -> None:
        """Release what the transport holds (HTTP connection pools); listeners close their own."""


@runtime_checkable
class ReadStatusQueries(Protocol):
    """A transport whose platform answers read-status queries instead of pushing read events."""

    read_status_schedule: tuple[int, int]  # (checks per sent 1:1 message, ms between checks)

    def read_by(self, account_id: str, platform_message_id: str) -> dict[str, int]:
        """Who read the message: reader id -> read time (ms, 0 if the platform gives none).
        Raises runtime.outbox.SendFailure when the platform cannot answer now."""
