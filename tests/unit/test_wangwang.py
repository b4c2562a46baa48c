"""The Wangwang transport against the fake bridge over real HTTP: signatures, paging and
confirming, the shop's echoes, idempotent sends and every failure class."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from runtime.accounts.registry import AccountSpec, create_account
from runtime.inbound.ingest import ingest_page
from runtime.ports import ListenerFailure, NeverReceived, OutboundSend, SendFailure
from transports.wangwang import WangwangCredentials, WangwangTransport
from transports.wangwang.client import GatewayFailure
from transports.wangwang.protocol import Identity
from transports.wangwang.signing import sign, timestamp

TOP = {
    "method": "taobao.user.seller.get",
    "timestamp": "2013-05-06 13:52:03",
    "format": "xml",
    "app_key": "test",
    "v": "2.0",
    "fields": "nick",
    "sign_method": "md5",
    "session": "test",
}
BUYER = "cntaobao买家一"


def test_the_top_md5_vector_and_our_hmac_vector():
    assert sign(TOP, "test", "md5") == "72CB4D809B375A54502C09360D879C64"
    assert sign(TOP, "test", "hmac-sha256") == "C0D897391A71B22C8587CF013B19DF59FFA77A3BDC88EC5C3C0D9A4F1E1A8312"
    assert sign({**TOP, "sign": "ignored"}, "test", "md5") == "72CB4D809B375A54502C09360D879C64"


def credentials_for(bridge, **changes) -> WangwangCredentials:
    values = {
        "gateway_url": bridge.url,
        "app_key": bridge.app_key,
        "app_secret": bridge.app_secret,
        "seller_id": bridge.seller_id,
    }
    return WangwangCredentials(**(values | changes))


@pytest.fixture
def transport(fake_wangwang) -> WangwangTransport:
    credentials = credentials_for(fake_wangwang)
    return WangwangTransport(lambda _: credentials, timeout_s=2)


def send_of(text: str = "您好", to: str | None = BUYER, request_id: str = "r1") -> OutboundSend:
    return OutboundSend(
        request_id=request_id, account_id="ww", conversation_id=f"conv-{BUYER}", recipient_id=to, text=text
    )


def test_both_sign_methods_are_accepted_and_a_wrong_secret_or_seller_is_an_authorization_failure(fake_wangwang):
    for method in ("hmac-sha256", "md5"):
        credentials = credentials_for(fake_wangwang, sign_method=method)
        assert WangwangTransport(lambda _, c=credentials: c).check_identity(credentials).seller_id
    for wrong, code in [
        ({"app_secret": "nope"}, "INVALID_SIGNATURE"),
        ({"seller_id": "cntaobao别家"}, "UNKNOWN_SELLER"),
    ]:
        credentials = credentials_for(fake_wangwang, **wrong)
        with pytest.raises(GatewayFailure) as refused:
            WangwangTransport(lambda _, c=credentials: c).check_identity(credentials)
        assert refused.value.code == code and refused.value.authorization
        with pytest.raises(ListenerFailure) as failed:
            WangwangTransport(lambda _, c=credentials: c).connect("ww", None)
        assert failed.value.authorization and failed.value.code == f"WANGWANG_{code}"


def test_a_stale_timestamp_and_a_malformed_parameter_are_refused_by_the_bridge(fake_wangwang):
    params = {
        "method": "kefu.wangwang.identity.get",
        "app_key": fake_wangwang.app_key,
        "seller_id": fake_wangwang.seller_id,
        "timestamp": timestamp(datetime.now(UTC) - timedelta(minutes=11)),
        "v": "1.0",
        "format": "json",
        "sign_method": "hmac-sha256",
    }
    stale = httpx.post(f"{fake_wangwang.url}/router", data=params | {"sign": sign(params, "ww-secret", "hmac-sha256")})
    assert stale.json()["error_response"]["code"] == "TIMESTAMP_OUT_OF_RANGE"
    params |= {"timestamp": timestamp(datetime.now(UTC)), "method": "kefu.wangwang.messages.get", "limit": "many"}
    bad = httpx.post(f"{fake_wangwang.url}/router", data=params | {"sign": sign(params, "ww-secret", "hmac-sha256")})
    assert bad.json()["error_response"]["code"] == "INVALID_PARAMETER"


def test_a_malformed_answer_names_the_field_and_is_not_a_success(fake_wangwang, transport):
    from transports.wangwang.client import GatewayClient

    class Broken(Identity):
        extra_required: int

    credentials = credentials_for(fake_wangwang)
    with pytest.raises(GatewayFailure) as broken:
        GatewayClient(2).call(credentials, "kefu.wangwang.identity.get", {}, Broken)
    assert (broken.value.stage, broken.value.code) == ("no-answer", "WANGWANG_MALFORMED_ANSWER_extra_required")


def test_pages_carry_buyers_and_echoes_and_a_page_replayed_before_its_confirm_is_deduped(
    store, fake_wangwang, transport
):
    create_account(store, AccountSpec(id="ww", platform="wangwang", identity=fake_wangwang.seller_id))
    fake_wangwang.buyer_says(BUYER, "在吗")
    fake_wangwang.buyer_says(BUYER, "什么时候发货")
    page = transport.page_after("ww", None)
    [group] = page.groups
    assert [m.content.text for m in group.messages] == ["在吗", "什么时候发货"]
    assert {(m.sender.id, m.sender.role, m.direct_peer_id) for m in group.messages} == {(BUYER, "buyer", BUYER)}
    assert ingest_page(store, page).rows_written == 2
    # kefu crashes here: committed, never confirmed. The bridge serves the page again.
    again = transport.page_after("ww", None)
    assert again.page_op_id == page.page_op_id and ingest_page(store, again).replayed
    transport.confirm("ww", again.cursor)
    assert transport.page_after("ww", None) is None and fake_wangwang.confirms == [page.cursor]

    receipt = transport.send(send_of("明天发货"))
    [echo] = transport.page_after("ww", page.cursor).groups[0].messages
    assert (echo.outbound_ref, echo.sender.role, echo.platform_message_id) == (
        "r1",
        "native_operator",
        receipt.platform_message_id,
    )


def test_sends_are_idempotent_by_request_id_and_failures_are_classified(fake_wangwang, transport):
    fake_wangwang.buyer_says(BUYER, "在吗")
    first = transport.send(send_of())
    assert transport.send(send_of()) == first and len(fake_wangwang.sends) == 1  # the bridge's idempotency

    def failure(message: OutboundSend) -> SendFailure:
        with pytest.raises(SendFailure) as failed:
            transport.send(message)
        return failed.value

    fake_wangwang.throttle_sends = 1
    throttled = failure(send_of(request_id="r2"))
    assert (throttled.kind, throttled.code, throttled.retry_after_s) == ("not-submitted", "WANGWANG_THROTTLED", 1)
    fake_wangwang.offline = True
    assert failure(send_of(request_id="r3")).kind == "not-submitted"
    fake_wangwang.offline = False
    nobody = failure(send_of(to="conv-not-a-buyer", request_id="r4"))
    assert (nobody.kind, nobody.code) == ("rejected", "WANGWANG_RECIPIENT_UNAVAILABLE")
    conflict = failure(send_of("别的内容"))
    assert (conflict.kind, conflict.code) == ("rejected", "WANGWANG_CLIENT_REF_CONFLICT")

    fake_wangwang.stall_sends, fake_wangwang.stall_s = 1, 3.0
    lost = failure(send_of(request_id="r5"))
    assert (lost.kind, lost.code) == ("unknown", "WANGWANG_NO_RESPONSE_ReadTimeout")
    found = transport.query_send("ww", "r5")
    assert found is not None and found.platform_message_id == fake_wangwang.sends[-1].message_id
    assert transport.query_send("ww", "never-sent") == NeverReceived()  # the bridge's word: never sent
    assert len(fake_wangwang.sends) == 2


def test_a_malformed_message_from_the_bridge_is_refused_naming_the_field_and_nothing_is_written(
    store, fake_wangwang, transport
):
    create_account(store, AccountSpec(id="ww", platform="wangwang", identity=fake_wangwang.seller_id))
    fake_wangwang.push_message(  # a bridge bug: no sender_role
        {
            "message_id": "m-1",
            "conversation_id": "conv-1",
            "sender_id": BUYER,
            "content_type": "text",
            "text": "在吗",
            "sent_at": 1,
        }
    )
    with pytest.raises(GatewayFailure) as malformed:
        transport.page_after("ww", None)
    assert (malformed.value.stage, malformed.value.code) == ("no-answer", "WANGWANG_MALFORMED_ANSWER_messages")
    with pytest.raises(ListenerFailure, match="WANGWANG_MALFORMED_ANSWER"):
        transport.connect("ww", None).receive(1)
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM inbound_message").scalar_one() == 0
