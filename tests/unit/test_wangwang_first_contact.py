"""A shop writing first on Wangwang (SPEC 3.8; issue 42 item 7): direct replies go to the last
observed external sender, else the stored platform peer (the conversation's, else its specific
direct route's `peer_id`), never to a conversation id; with neither, the send fails
WANGWANG_DIRECT_RECIPIENT_UNAVAILABLE without a platform call. Sends go through the real
Wangwang transport to the fake bridge over real HTTP, whose record of calls is the ground truth."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from runtime import pipeline
from runtime.accounts.credentials import save_credentials
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.routes import RouteSpec, create_route
from runtime.errors import KefuError
from runtime.inbound.ingest import ingest_page
from runtime.outbox.first_contact import open_route_conversation
from runtime.outbox.manual import ManualSend, send_manual
from tests.fakes.wangwang import FakeWangwangBridge
from tests.local_services import Local
from transports.wangwang import WangwangCredentials, WangwangTransport
from worker.cli import cli

ACCOUNT = "ww"
NEW_BUYER = "cntaobao新客"  # ordered, never wrote
CONVERSATION = f"conv-{NEW_BUYER}"


@dataclass
class WangwangServices(Local):
    wangwang: WangwangTransport | None = None

    def transport_of(self, account_id: str) -> WangwangTransport:  # type: ignore[override]
        assert self.wangwang is not None
        return self.wangwang


def credentials_of(bridge: FakeWangwangBridge) -> WangwangCredentials:
    return WangwangCredentials(
        gateway_url=bridge.url, app_key=bridge.app_key, app_secret=bridge.app_secret, seller_id=bridge.seller_id
    )


@pytest.fixture
def ww(store, fake_wangwang: FakeWangwangBridge) -> str:
    create_account(store, AccountSpec(id=ACCOUNT, platform="wangwang", identity=fake_wangwang.seller_id))
    with store.write() as conn:
        save_credentials(conn, ACCOUNT, credentials_of(fake_wangwang).storable())
    create_route(store, RouteSpec(id="ww-all", account_id=ACCOUNT, conversation_type="direct"), op_id="op-all")
    fake_wangwang.known_buyers = {NEW_BUYER}
    return ACCOUNT


@pytest.fixture
def services(settings, store, fake_wangwang, ww) -> WangwangServices:
    credentials = credentials_of(fake_wangwang)
    return WangwangServices(settings, store, wangwang=WangwangTransport(lambda _: credentials, timeout_s=5))


@pytest.fixture
def send_calls(fake_wangwang: FakeWangwangBridge) -> list[dict[str, str]]:
    """Every `message.send` call that reached the bridge, answered or refused."""
    calls: list[dict[str, str]] = []
    handle = fake_wangwang.handle

    def recording(params: dict[str, str]):
        if params.get("method") == "kefu.wangwang.message.send":
            calls.append(params)
        return handle(params)

    fake_wangwang.handle = recording  # type: ignore[method-assign]
    return calls


def route_to(store, peer: str | None, route_id: str = "first") -> None:
    spec = RouteSpec(
        id=route_id,
        account_id=ACCOUNT,
        conversation_type="direct",
        target="specific",
        conversation_id=CONVERSATION,
        peer_id=peer,
    )
    create_route(store, spec, op_id=f"op-{route_id}")


def paged(services: WangwangServices) -> int:
    """What the bridge holds for the account, paged and ingested; the conversation's customer."""
    page = services.wangwang.page_after(ACCOUNT, None)  # type: ignore[union-attr]
    assert page is not None
    [customer] = ingest_page(services.store, page).customer_ids
    return customer


def test_a_manual_send_with_no_inbound_at_all_goes_to_the_routes_peer(services, store, fake_wangwang, send_calls):
    route_to(store, NEW_BUYER)
    customer = open_route_conversation(store, "first")
    assert open_route_conversation(store, "first") == customer  # idempotent
    request = send_manual(store, ManualSend(request_id="first-1", customer_id=customer, text="您好，您的订单已发货"))
    assert (request.state, request.recipient_id) == ("pending", NEW_BUYER)
    assert pipeline.deliver(services, "first-1").outcome == "sent"
    [sent] = fake_wangwang.sends
    assert (sent.to_id, sent.conversation_id, sent.text) == (NEW_BUYER, CONVERSATION, "您好，您的订单已发货")


def test_a_conversation_the_shop_opened_natively_is_answered_at_the_routes_peer(
    services, store, fake_wangwang, send_calls
):
    """The shop wrote first from Qianniu: the bridge pages the shop's own message (no buyer, no
    peer). The route's peer used to be stored and never read: the send failed before the fix."""
    fake_wangwang.push_message(
        {
            "message_id": "ww-native-1",
            "conversation_id": CONVERSATION,
            "conversation_type": "direct",
            "sender_id": f"{fake_wangwang.seller_id}:客服",
            "sender_role": "service",
            "content_type": "text",
            "text": "亲，您拍的宝贝已经发货了",
            "sent_at": 1_800_000_000_000,
        }
    )
    customer = paged(services)
    route_to(store, NEW_BUYER)
    request = send_manual(store, ManualSend(request_id="first-2", customer_id=customer, text="有问题随时找我"))
    assert (request.state, request.error_code, request.recipient_id) == ("pending", None, NEW_BUYER)
    assert pipeline.deliver(services, "first-2").outcome == "sent"
    assert [(s.to_id, s.conversation_id) for s in fake_wangwang.sends] == [(NEW_BUYER, CONVERSATION)]


def test_an_observed_buyer_wins_over_the_routes_peer(services, store, fake_wangwang, send_calls):
    route_to(store, "cntaobao别人")  # a stale or mistyped peer
    fake_wangwang.buyer_says("cntaobao买家一", "在吗", conversation_id=CONVERSATION)
    customer = paged(services)
    request = send_manual(store, ManualSend(request_id="first-3", customer_id=customer, text="在的"))
    assert request.recipient_id == "cntaobao买家一"
    assert pipeline.deliver(services, "first-3").outcome == "sent"
    assert [s.to_id for s in fake_wangwang.sends] == ["cntaobao买家一"]


def test_with_neither_a_buyer_nor_a_peer_the_send_fails_without_a_platform_call(
    services, store, fake_wangwang, send_calls
):
    route_to(store, None)
    customer = open_route_conversation(store, "first")
    request = send_manual(store, ManualSend(request_id="first-4", customer_id=customer, text="您好"))
    assert (request.state, request.error_code, request.recipient_id) == (
        "failed",
        "WANGWANG_DIRECT_RECIPIENT_UNAVAILABLE",
        None,
    )
    pipeline.deliver(services, "first-4")
    assert send_calls == [] and fake_wangwang.sends == []  # never sent to the conversation id


def test_only_a_specific_direct_route_opens_a_conversation(store, ww):
    with pytest.raises(KefuError) as unknown:
        open_route_conversation(store, "nope")
    assert unknown.value.code == "KEFU_ROUTE_UNKNOWN"
    with pytest.raises(KefuError) as not_one:
        open_route_conversation(store, "ww-all")
    assert not_one.value.code == "KEFU_ROUTE_NOT_A_CONVERSATION"
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM customer").scalar_one() == 0  # nothing half-written


def test_an_operator_adds_a_route_with_a_peer_opens_it_and_writes_first(kefu, store, fake_wangwang, ww, send_calls):
    env = {"COLUMNS": "200", "KEFU_LANGUAGE": "en"}
    added = kefu.invoke(
        cli,
        ["routes", "add", "first", "--account", ACCOUNT, "--type", "direct"]
        + ["--conversation", CONVERSATION, "--peer", NEW_BUYER],
        env=env,
    )
    assert added.exit_code == 0, added.output
    opened = kefu.invoke(cli, ["routes", "open", "first"], env=env)
    assert opened.exit_code == 0, opened.output
    with store.read() as conn:
        customer = conn.execute("SELECT id FROM customer WHERE conversation_id = ?", (CONVERSATION,)).scalar_one()
    assert f"customer {customer}" in opened.output
    sent = kefu.invoke(cli, ["send", str(customer), "您好，您的订单已发货", "--request-id", "first-cli"], env=env)
    assert sent.exit_code == 0, sent.output
    assert [(s.client_ref, s.to_id) for s in fake_wangwang.sends] == [("first-cli", NEW_BUYER)]
