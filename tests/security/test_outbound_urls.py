"""kefu posts only where a URL belongs: a forged callback's session webhook naming an internal
address is refused before any request (issue 38, item 3)."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta

import pytest

from config import DingTalkSettings
from runtime.inbound.pages import ReplyWebhook
from runtime.outbox.recipients import REPLY_WEBHOOK
from runtime.ports import MediaFetchFailure, OutboundSend, SendFailure
from transports.dingtalk.openapi import DingTalkOpenAPI


@pytest.mark.parametrize(
    "target",
    [
        "http://127.0.0.1:{port}/robot/sendBySession?session=x",  # an internal service
        "https://oapi.dingtalk.com.127.0.0.1.nip.io:{port}/robot/sendBySession",
        "https://user:pw@oapi.dingtalk.com/robot/sendBySession?session=x",
        "https://oapi.dingtalk.com/robot/send?access_token=x",  # DingTalk's, another endpoint
    ],
)
def test_a_session_webhook_that_is_not_dingtalks_is_refused_before_any_request(target):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(0.2)
        api = DingTalkOpenAPI(DingTalkSettings())
        url = target.format(port=listener.getsockname()[1])
        hook = ReplyWebhook(url=url, expires_at=datetime.now(UTC) + timedelta(hours=1))
        send = OutboundSend(
            request_id="r", account_id="ding", conversation_id="c", recipient_id=REPLY_WEBHOOK, text="您好",
            reply_webhook=hook,
        )  # fmt: skip
        with pytest.raises(SendFailure) as refused:
            api.send_to_session(send)
        assert (refused.value.kind, refused.value.code) == ("rejected", "DINGTALK_SESSION_WEBHOOK_NOT_DINGTALK")
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing connected
    assert api.is_session_webhook("https://oapi.dingtalk.com/robot/sendBySession?session=abc")


class _Target:
    """An internal service on loopback that records what reached it; `redirect_to` makes it
    answer 302 (the bridge's host leading kefu elsewhere)."""

    def __init__(self, redirect_to: str | None = None) -> None:
        import http.server
        import threading

        target = self
        self.paths: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                target.paths.append(self.path)
                if redirect_to is not None:
                    self.send_response(302)
                    self.send_header("Location", redirect_to)
                else:
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_bridge_cannot_point_kefus_downloads_at_another_host(fake_wangwang):
    from tests.unit.test_wangwang import BUYER, credentials_for
    from transports.wangwang import WangwangTransport

    credentials = credentials_for(fake_wangwang)  # the bridge on 127.0.0.1
    transport = WangwangTransport(lambda _: credentials, timeout_s=2)
    internal = _Target()
    media_id = fake_wangwang.buyer_sends_image(BUYER, b"\x89PNG\r\n\x1a\n")
    try:
        fake_wangwang.hostile_url = f"http://localhost:{internal.port}/admin"  # another host: refused unasked
        with pytest.raises(MediaFetchFailure) as direct:
            transport.fetch_media("ww", media_id, 1 << 20)
        hop = _Target(redirect_to=f"http://localhost:{internal.port}/admin")  # on the bridge's host, then away
        try:
            fake_wangwang.hostile_url = f"http://127.0.0.1:{hop.port}/media/x"
            with pytest.raises(MediaFetchFailure) as redirected:
                transport.fetch_media("ww", media_id, 1 << 20)
        finally:
            hop.close()
        assert hop.paths == ["/media/x"] and internal.paths == []  # the redirect was never followed
        for refused in (direct.value, redirected.value):
            assert refused.code == "WANGWANG_MEDIA_URL_NOT_ALLOWED"
        allowed = WangwangTransport(lambda _: credentials, timeout_s=2, media_hosts=("localhost",))
        fake_wangwang.hostile_url = f"http://localhost:{internal.port}/store/x"  # an operator's named host
        with pytest.raises(MediaFetchFailure) as sized:
            allowed.fetch_media("ww", media_id, 1 << 20)
        assert internal.paths == ["/store/x"] and sized.value.code == "WANGWANG_MEDIA_SIZE_MISMATCH"
    finally:
        internal.close()


@pytest.mark.parametrize(
    ("gateway_url", "plain_http_hosts", "refused"),
    [
        ("http://bridge.shop.lan:8700", (), True),  # a forged answer on the path would be believed
        ("http://10.0.0.5:8700", (), True),
        ("http://10.0.0.5:8700", ("10.0.0.5",), False),  # an operator vouches for this network
        ("https://bridge.shop.lan:8700", (), False),
        ("http://127.0.0.1:8700", (), False),  # a bridge next to kefu
        ("http://localhost:8700", (), False),
        ("http://[::1]:8700", (), False),
        ("http://127.example.com:8700", (), True),  # a name, not a loopback address
    ],
)
def test_a_bridge_elsewhere_is_reached_over_tls_only(gateway_url, plain_http_hosts, refused):
    from transports.wangwang.client import plain_http_refused

    assert plain_http_refused(gateway_url, plain_http_hosts) is refused


def test_a_plain_http_bridge_elsewhere_is_refused_before_any_request_and_stops_its_listener():
    from transports.wangwang import WangwangCredentials, WangwangTransport
    from transports.wangwang.client import GatewayFailure

    with socket.create_server(("0.0.0.0", 0)) as listener:
        listener.settimeout(0.2)
        port = listener.getsockname()[1]
        credentials = WangwangCredentials(
            gateway_url=f"http://{socket.gethostname()}.invalid:{port}", app_key="k", app_secret="s", seller_id="x"
        )
        with pytest.raises(GatewayFailure) as refused:
            WangwangTransport(lambda _: credentials, timeout_s=2).fetch("ww", None)
        with pytest.raises(TimeoutError):
            listener.accept()
    assert refused.value.kefu_code == "WANGWANG_PLAIN_HTTP_REFUSED"
    assert refused.value.authorization  # an operator must renew the URL: retrying changes nothing


def test_accounts_add_refuses_a_plain_http_bridge_elsewhere(kefu, store, monkeypatch):
    from runtime.accounts.registry import list_accounts
    from worker.cli import cli

    monkeypatch.setenv("KEFU_SETUP_SECRET", "bridge-secret")
    args = ["accounts", "add", "wangwang", "--id", "ww", "--gateway-url", "http://bridge.shop.lan:8700"]
    result = kefu.invoke(cli, [*args, "--app-key", "kefu", "--seller-id", "cntaobao店", "--yes"])
    assert result.exit_code == 2 and "KEFU_INVALID_INPUT" in result.output
    assert "KEFU_WANGWANG__PLAIN_HTTP_HOSTS" in result.output
    assert list_accounts(store) == []
