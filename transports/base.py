"""What the worker needs from a platform transport.

Besides this interface, a transport publishes what it receives: inbound pages to
`kefu.ingest.page`, and buyer read receipts (runtime.read_receipts.BuyerReadReceipt, as JSON)
to `kefu.receipts.buyer_read`.
"""

from __future__ import annotations

from typing import Protocol

from runtime.outbox import OutboundSend, SendReceipt
from runtime.pages import InboundPage


class Transport(Protocol):
    platform: str
    stream_id: str  # the provider stream whose cursor catch-up reads

    def send(self, message: OutboundSend) -> SendReceipt:
        """Deliver one message (`message.media` set: one file); raise runtime.outbox.SendFailure
        classified by outcome. `message.request_id` is the client reference: pass it to the
        platform where it takes one, and set it as `outbound_ref` on the platform's echo."""

    def query_send(self, request_id: str) -> SendReceipt | None:
        """The receipt of an earlier send by its request id, or None if the platform has none."""

    def page_after(self, account_id: str, cursor: str | None) -> InboundPage | None:
        """The next page of inbound messages after a committed cursor (catch-up), or None."""
