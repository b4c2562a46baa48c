"""A transport whose platform is a function, for testing the pipeline without a platform (the
pattern of httpx.MockTransport): `MockTransport(handler)` answers each send with
`handler(send)`, which returns a SendReceipt or raises SendFailure.

    sent = []
    transport = MockTransport(lambda send: sent.append(send) or SendReceipt(platform_message_id="m1"))

It records what the pipeline told it (`sent`, `confirmed`), serves queued pages to catch-up,
and answers receipt and read-status queries from the functions it is given.
"""

from __future__ import annotations

from collections.abc import Callable

from runtime.inbound.pages import InboundPage
from runtime.ports import ListenerConnection, ListenerFailure, OutboundSend, SendLookup, SendReceipt


def _numbered(send: OutboundSend) -> SendReceipt:
    return SendReceipt(platform_message_id=f"mock-{send.request_id}")


class MockTransport:
    platform = "mock"
    stream_id = "mock"

    def __init__(
        self,
        handler: Callable[[OutboundSend], SendReceipt] = _numbered,
        lookup: Callable[[str], SendLookup] = lambda request_id: None,
    ) -> None:
        self.handler = handler
        self.lookup = lookup
        self.sent: list[OutboundSend] = []
        self.confirmed: list[str] = []
        self.pages: list[InboundPage] = []  # served to catch-up, in order, after the cursor given

    def send(self, message: OutboundSend) -> SendReceipt:
        self.sent.append(message)
        return self.handler(message)

    def query_send(self, account_id: str, request_id: str) -> SendLookup:
        return self.lookup(request_id)

    def page_after(self, account_id: str, cursor: str | None) -> InboundPage | None:
        cursors = [page.cursor for page in self.pages]
        start = cursors.index(cursor) + 1 if cursor in cursors else 0
        return next((page for page in self.pages[start:] if page.account_id == account_id), None)

    def confirm(self, account_id: str, cursor: str) -> None:
        self.confirmed.append(cursor)

    def connect(self, account_id: str, cursor: str | None) -> ListenerConnection:
        raise ListenerFailure("MOCK_TRANSPORT_DOES_NOT_LISTEN")

    def close(self) -> None:
        return None


class MockReadStatusTransport(MockTransport):
    """A MockTransport whose platform answers read-status queries (as DingTalk does):
    `readers(platform_message_id)` gives reader id -> read time in ms."""

    def __init__(
        self,
        readers: Callable[[str], dict[str, int]],
        schedule: tuple[int, int] = (1, 1000),
        handler: Callable[[OutboundSend], SendReceipt] = _numbered,
    ) -> None:
        super().__init__(handler)
        self.readers = readers
        self.read_status_schedule = schedule

    def read_by(self, account_id: str, platform_message_id: str) -> dict[str, int]:
        return self.readers(platform_message_id)
