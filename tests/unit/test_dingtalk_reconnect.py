"""A DingTalk listener through routine disconnects, cut sockets, a hanging gateway and refused
credentials: the worker's listener shell in this process with the real transport (the
`dingtalk-stream` SDK's frames, httpx, websockets) against the local fake DingTalk's real HTTP
and WebSocket servers, recording into a real delivery store. Every state change is observed."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from config import DingTalkSettings, ListenerSettings
from runtime.accounts.registry import AccountSpec, create_account, load_account
from runtime.admission.routes import RouteSpec, create_route
from runtime.inbound.pages import InboundPage
from runtime.ports import ListenerFailure
from tests.fakes.dingtalk import FakeDingTalk
from tests.unit.test_listeners import Observer, Published
from transports.dingtalk import DingTalkCredentials
from transports.dingtalk.stream import ticket_address
from transports.dingtalk.transport import DingTalkTransport
from worker.listeners import AccountListener

ACCOUNT = "ding"
FAST = ListenerSettings(reconnect_initial_ms=20, reconnect_max_ms=80, reconnect_max_attempts=3)
TIMEOUT_S = 0.3  # KEFU_DINGTALK__TIMEOUT_S: connections/open and the socket's opening handshake


def until(condition: Callable[[], bool], what: str, timeout_s: float = 5) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.fixture
def ding(store, fake_dingtalk: FakeDingTalk) -> str:
    create_account(store, AccountSpec(id=ACCOUNT, platform="dingtalk", identity=fake_dingtalk.robot_code))
    create_route(store, RouteSpec(id="ding-direct", account_id=ACCOUNT, conversation_type="direct"), op_id="op-dd")
    return ACCOUNT


@pytest.fixture
def listen(store, fake_dingtalk: FakeDingTalk, ding: str) -> Iterator[Callable[..., tuple[Observer, Published]]]:
    """Start the account's listener on a real DingTalk transport; stopped at the end."""
    started: list[tuple[AccountListener, DingTalkTransport]] = []

    def start(settings: ListenerSettings = FAST) -> tuple[Observer, Published]:
        credentials = DingTalkCredentials(
            client_id=fake_dingtalk.client_id,
            client_secret=fake_dingtalk.client_secret,
            robot_code=fake_dingtalk.robot_code,
        )
        dingtalk = DingTalkSettings(openapi_url=fake_dingtalk.url, oapi_url=fake_dingtalk.url, timeout_s=TIMEOUT_S)
        transport = DingTalkTransport(dingtalk, lambda _: credentials)
        with store.read() as conn:
            account = load_account(conn, ding)
        observer, published = Observer(), Published()
        listener = AccountListener(account, transport, store, published, settings, observer)
        started.append((listener, transport))
        listener.start()
        return observer, published

    yield start
    for listener, transport in started:
        listener.stop()
        transport.close()


def account_facts(store) -> tuple[str, str | None, str]:
    with store.read() as conn:
        account = load_account(conn, ACCOUNT)
    return account.listener_state, account.last_error, account.authorization


def leaks(caplog: pytest.LogCaptureFixture, fake: FakeDingTalk, *texts: str) -> list[str]:
    """Log lines of kefu's side (the fake's own server lines aside) holding the secret, a
    ticket or a message text, logging at DEBUG (the most a deployment could show)."""
    secrets = (fake.client_secret, "ticket=", *texts)
    return [
        record.getMessage()
        for record in caplog.records
        if not record.name.startswith("websockets.server") and any(s in record.getMessage() for s in secrets)
    ]


def message_ids(published: Published) -> list[str]:
    return [
        message.platform_message_id
        for page in published.items
        if isinstance(page, InboundPage)
        for group in page.groups
        for message in group.messages
    ]


def test_twenty_routine_disconnects_in_a_row_never_leave_running_and_a_message_still_arrives(
    store, fake_dingtalk, listen, caplog
):
    caplog.set_level(logging.DEBUG)
    observer, published = listen()
    observer.wait_for("running")
    for n in range(1, 21):
        until(lambda n=n: fake_dingtalk.connections == n and fake_dingtalk.connected, f"connection {n}")
        fake_dingtalk.ask_disconnect()
    until(lambda: fake_dingtalk.connections == 21 and fake_dingtalk.connected, "connection 21")
    msg_id = fake_dingtalk.buyer_says("staff-1", "什么时候发货呢")
    until(lambda: fake_dingtalk.unacked == 0 and bool(published.items), "the message, published and ACKed")

    assert message_ids(published) == [msg_id]
    assert observer.sequence() == [("starting", None, None), ("running", None, None)]  # no reconnect, no budget
    assert fake_dingtalk.tickets_issued == 21  # each handover on a new ticket
    assert account_facts(store) == ("running", None, "ready")
    assert leaks(caplog, fake_dingtalk, "什么时候发货呢") == []


def test_twenty_cut_sockets_each_after_a_stable_run_stay_running(store, fake_dingtalk, listen):
    stable_ms = 100
    observer, published = listen(FAST.model_copy(update={"reconnect_stable_ms": stable_ms}))
    observer.wait_for("running")
    for n in range(1, 21):
        until(lambda n=n: fake_dingtalk.connections == n and fake_dingtalk.connected, f"connection {n}")
        observer.wait_for("running", count=n)
        opened = observer.changes[-1][0]
        until(lambda opened=opened: time.monotonic() - opened > 2 * stable_ms / 1000, f"run {n} to be stable")
        fake_dingtalk.drop()
    observer.wait_for("running", count=21)
    assert {delay for state, _, delay in observer.sequence() if state == "reconnecting"} == {20}  # budget whole
    until(lambda: fake_dingtalk.connected, "the last connection")
    msg_id = fake_dingtalk.buyer_says("staff-2", "可以开发票吗")
    until(lambda: fake_dingtalk.unacked == 0 and bool(published.items), "the message, published and ACKed")

    assert message_ids(published) == [msg_id]
    assert "failed" not in {state for state, _, _ in observer.sequence()}
    assert account_facts(store) == ("running", None, "ready")


def test_a_hanging_connections_open_times_out_into_reconnecting_and_recovers(store, fake_dingtalk, listen):
    fake_dingtalk.open_stalls, fake_dingtalk.open_stall_s = 2, 3.0
    began = time.monotonic()
    observer, _ = listen()
    observer.wait_for("running", timeout_s=10)
    assert observer.sequence() == [
        ("starting", None, None),
        ("reconnecting", "DINGTALK_OPEN_TIMEOUT", 20),
        ("starting", None, None),
        ("reconnecting", "DINGTALK_OPEN_TIMEOUT", 40),
        ("starting", None, None),
        ("running", None, None),
    ]
    first_timeout = next(at for at, change in observer.changes if change.state == "reconnecting")
    assert first_timeout - began < TIMEOUT_S + 1.0  # bounded by the timeout, not by the stalled answer
    assert account_facts(store) == ("running", None, "ready")


def test_a_hanging_connections_open_after_a_disconnect_is_a_recoverable_failure(store, fake_dingtalk, listen):
    observer, published = listen()
    observer.wait_for("running")
    fake_dingtalk.open_stalls, fake_dingtalk.open_stall_s = 1, 3.0
    fake_dingtalk.ask_disconnect()
    observer.wait_for("running", count=2)
    assert observer.sequence()[1:] == [
        ("running", None, None),
        ("reconnecting", "DINGTALK_OPEN_TIMEOUT", 20),
        ("starting", None, None),
        ("running", None, None),
    ]
    msg_id = fake_dingtalk.buyer_says("staff-3", "有优惠券吗")
    until(lambda: bool(published.items), "the message")
    assert message_ids(published) == [msg_id]


@pytest.mark.parametrize(
    "status, body",
    [
        (401, {"code": "authFailed", "message": "鉴权失败"}),
        (403, {"code": "Forbidden.AccessDenied", "message": "app not allowed"}),
        (400, {"code": "invalidClientIdOrSecret", "message": "无效的clientId或者clientSecret"}),
    ],
)
def test_refused_credentials_at_connections_open_fail_the_listener_and_the_authorization(
    store, fake_dingtalk, listen, status, body, caplog
):
    caplog.set_level(logging.DEBUG)
    fake_dingtalk.open_answers = [(status, body)]
    observer, _ = listen(ListenerSettings(reconnect_initial_ms=20, reconnect_max_ms=80, reconnect_max_attempts=20))
    observer.wait_for("failed")
    assert observer.sequence() == [("starting", None, None), ("failed", "DINGTALK_AUTH_FAILED", None)]
    assert fake_dingtalk.tickets_issued == 0 and fake_dingtalk.open_answers == []  # asked once, not again
    assert account_facts(store) == ("failed", "DINGTALK_AUTH_FAILED", "failed")
    assert leaks(caplog, fake_dingtalk) == []


@pytest.mark.parametrize(
    "status, body, code",
    [
        (503, {"code": "ServiceUnavailable", "message": "busy"}, "DINGTALK_ServiceUnavailable"),
        (403, {"code": "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi", "message": "qps"}, "DINGTALK_THROTTLED"),
        (200, {"unexpected": True}, "DINGTALK_OPEN_MALFORMED"),
    ],
)
def test_a_gateway_that_is_busy_throttles_or_answers_nonsense_is_retried(
    store, fake_dingtalk, listen, status, body, code
):
    fake_dingtalk.open_answers = [(status, body)]
    observer, _ = listen()
    observer.wait_for("running")
    assert observer.sequence()[:2] == [("starting", None, None), ("reconnecting", code, 20)]
    assert account_facts(store) == ("running", None, "ready")


def test_a_token_endpoint_that_fails_is_retried_and_one_that_refuses_is_final(store, fake_dingtalk, listen):
    fake_dingtalk.token_answers = [(503, {"code": "ServiceUnavailable", "message": "busy"})]
    observer, _ = listen()
    observer.wait_for("running")
    assert observer.sequence()[:2] == [("starting", None, None), ("reconnecting", "DINGTALK_TOKEN_UNAVAILABLE", 20)]

    fake_dingtalk.token_answers = [(400, {"code": "invalidClientIdOrSecret", "message": "无效的clientId"})]
    observer, _ = listen()  # a second listener (the first keeps its connection)
    observer.wait_for("failed")
    assert observer.sequence() == [("starting", None, None), ("failed", "DINGTALK_AUTH_FAILED", None)]


@pytest.mark.parametrize(
    "status, body, code, authorization",
    [
        (401, {"code": "authFailed"}, "DINGTALK_AUTH_FAILED", True),
        (403, {}, "DINGTALK_AUTH_FAILED", True),
        (400, {"code": "invalidClientIdOrSecret"}, "DINGTALK_AUTH_FAILED", True),
        (400, {"code": "invalidParameter"}, "DINGTALK_invalidParameter", False),
        (403, {"code": "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi"}, "DINGTALK_THROTTLED", False),
        (429, {}, "DINGTALK_THROTTLED", False),
        (502, {}, "DINGTALK_HTTP_502", False),
    ],
)
def test_an_error_answer_to_connections_open_is_classified(status, body, code, authorization):
    with pytest.raises(ListenerFailure) as failure:
        ticket_address(httpx.Response(status, json=body))
    assert (failure.value.code, failure.value.authorization) == (code, authorization)


def test_a_ticket_becomes_the_websocket_address_with_the_ticket_quoted():
    answer = httpx.Response(200, json={"endpoint": "wss://gateway/connect", "ticket": "a+b/c="})
    assert ticket_address(answer) == "wss://gateway/connect?ticket=a%2Bb%2Fc%3D"


def test_a_gateway_that_accepts_then_drops_every_connection_fails_the_listener_with_an_alert(
    store, fake_dingtalk, listen
):
    """Issue 42 item 5: each connection opens and is cut at once, no page commits. The
    listener used to count every connect as a recovery and flap forever without an alert."""
    from runtime.operators.alerts import AlertKind, undelivered
    from runtime.operators.status import notices

    fake_dingtalk.drop_every_connection = True
    try:
        observer, _ = listen(FAST.model_copy(update={"reconnect_stable_ms": 10_000}))
        observer.wait_for("failed", timeout_s=20)
    finally:
        fake_dingtalk.drop_every_connection = False
    sequence = observer.sequence()
    assert [state for state, _, _ in sequence].count("running") == 4  # connected four times
    assert [delay for state, _, delay in sequence if state == "reconnecting"] == [20, 40, 80]
    assert sequence[-1] == ("failed", "KEFU_LISTENER_RETRIES_EXHAUSTED", None)
    assert fake_dingtalk.connections == 4  # and never again
    assert account_facts(store) == ("failed", "KEFU_LISTENER_RETRIES_EXHAUSTED", "ready")
    alerts = [(a.kind, a.account_id, a.code) for a in undelivered(store)]
    assert alerts == [(AlertKind.LISTENER_FAILED, ACCOUNT, "KEFU_LISTENER_RETRIES_EXHAUSTED")]
    assert notices(store).listeners_failed == [ACCOUNT]
