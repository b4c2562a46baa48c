"""kefu's DingTalk robot transport: Stream mode in, OpenAPI out.

DingTalk keeps no message history a robot could page through, and takes no client reference
on a send: `page_after` has nothing to catch up, and `query_send` cannot look a send up by
kefu's request id, so a send whose outcome is unknown stays with the operator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from config import DingTalkSettings
from runtime.inbound.pages import InboundPage
from runtime.ports import ListenerFailure, OutboundSend, SendFailure, SendReceipt
from transports.dingtalk.credentials import DingTalkCredentials
from transports.dingtalk.openapi import AUTH_FAILED, DingTalkOpenAPI
from transports.dingtalk.robot import STREAM_ID

if TYPE_CHECKING:
    from transports.dingtalk.stream import StreamConnection

Credentials = Callable[[str], DingTalkCredentials]


class DingTalkTransport:
    platform = "dingtalk"
    stream_id = STREAM_ID

    def __init__(
        self, settings: DingTalkSettings, credentials: Credentials, api: DingTalkOpenAPI | None = None
    ) -> None:
        self._settings = settings
        self._credentials = credentials
        self.api = api or DingTalkOpenAPI(settings)
        self.read_status_schedule = (settings.read_status_checks, int(settings.read_status_interval_s * 1000))

    def send(self, message: OutboundSend) -> SendReceipt:
        return self.api.send(self._credentials(message.account_id), message)

    def query_send(self, account_id: str, request_id: str) -> SendReceipt | None:
        return None

    def confirm(self, account_id: str, cursor: str) -> None:
        return None  # Stream messages are confirmed by their ACK

    def close(self) -> None:
        self.api.close()

    def page_after(self, account_id: str, cursor: str | None) -> InboundPage | None:
        return None

    def check_identity(self, credentials: DingTalkCredentials) -> None:
        """Raise SendFailure unless DingTalk issues a token for these credentials."""
        self.api.access_token(credentials, refresh=True)

    def connect(self, account_id: str, cursor: str | None) -> StreamConnection:
        credentials = self._credentials(account_id)
        try:
            self.api.access_token(credentials)  # tells refused credentials from a network problem
        except SendFailure as failure:
            raise _token_failure(failure) from None
        from transports.dingtalk.stream import open_stream  # the SDK loads with the first connection

        return open_stream(account_id, credentials, self._settings)

    def fetch_media(self, account_id: str, ref: str, max_bytes: int) -> bytes:
        return self.api.download(self._credentials(account_id), ref, max_bytes)

    def read_by(self, account_id: str, platform_message_id: str) -> dict[str, int]:
        return self.api.read_by(self._credentials(account_id), platform_message_id)


def _token_failure(failure: SendFailure) -> ListenerFailure:
    """Only a refused token request (a 4xx) is about the credentials and final; throttling, a
    5xx or the network are retried, under their own codes."""
    if failure.kind == "rejected":
        return ListenerFailure(AUTH_FAILED, authorization=True)
    return ListenerFailure(failure.code)
