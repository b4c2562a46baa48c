"""DingTalk's 1:1 recipient rule (runtime.outbox.recipients.dingtalk_recipient): the buyer's staff id,
else the conversation's latest session webhook that has not expired, else
DINGTALK_RECIPIENT_UNAVAILABLE before any platform call. Sends go to the local fake DingTalk
over real HTTP; its batchSend refuses encrypted senderIds as DingTalk does."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from config import DingTalkSettings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.batches import evaluate, load_customer, open_batch
from runtime.admission.routes import RouteSpec, create_route
from runtime.agent.tools import TurnBinding, execute
from runtime.inbound.ingest import ingest_page
from runtime.inbound.pages import ReplyWebhook
from runtime.outbox.manual import ManualSend, send_manual
from runtime.outbox.read_checks import schedule_read_checks
from runtime.outbox.recipients import REPLY_WEBHOOK, RecipientUnavailable, dingtalk_recipient
from runtime.outbox.requests import AttemptGrant, AttemptSkipped, begin_attempt, record_failure, record_sent
from runtime.ports import MediaPayload, OutboundSend, SendFailure, ToolCall
from tests.fakes.dingtalk import FakeDingTalk, sender_id_of
from transports.dingtalk.openapi import DingTalkOpenAPI
from transports.dingtalk.robot import parse_robot_message, robot_page

HOUR_MS = 3_600_000


@pytest.fixture
def ding(store, fake_dingtalk: FakeDingTalk) -> str:
    create_account(store, AccountSpec(id="ding", platform="dingtalk", identity=fake_dingtalk.robot_code))
    create_route(store, RouteSpec(id="ding-direct", account_id="ding", conversation_type="direct"), op_id="op-dd")
    return "ding"


@pytest.fixture
def api(fake_dingtalk: FakeDingTalk) -> DingTalkOpenAPI:
    return DingTalkOpenAPI(DingTalkSettings(openapi_url=fake_dingtalk.url, oapi_url=fake_dingtalk.url, timeout_s=5))


def receive(store, fake: FakeDingTalk, user: str, staff: bool, webhook_ttl_s: float = 5400.0, n: int = 1) -> int:
    """A direct robot message as DingTalk sends it (with a session webhook the fake serves),
    ingested; returns the customer id."""
    conversation = f"cid-{user}"
    data = {
        "conversationId": conversation,
        "conversationType": "1",
        "msgId": f"msg-{user}-{n}",
        "msgtype": "text",
        "text": {"content": "在吗"},
        "createAt": int(time.time() * 1000),
        "senderId": sender_id_of(user),
        "senderNick": user,
        "robotCode": fake.robot_code,
        **({"senderStaffId": user} if staff else {}),
        **fake.session_webhook(conversation, webhook_ttl_s),
    }
    return ingest_page(store, robot_page("ding", parse_robot_message(data))).customer_ids[0]


def attempt(store, api, credentials, request_id: str) -> str:
    """One attempt of the request against the fake, recorded; returns how it ended."""
    grant = begin_attempt(store, request_id, "w", lease_s=60)
    assert isinstance(grant, AttemptGrant), grant
    try:
        receipt = api.send(credentials, grant.send)
    except SendFailure as failure:
        record_failure(store, request_id, grant.attempt_no, failure)
        return f"{failure.kind} {failure.code}"
    record_sent(store, request_id, grant.attempt_no, receipt)
    return "sent"


def stored(store, request_id: str) -> tuple:
    with store.read() as conn:
        return conn.execute(
            "SELECT recipient_id, state, error_code, platform_message_id FROM outbox_request WHERE request_id = ?",
            (request_id,),
        ).one()


def no_platform_call(fake: FakeDingTalk) -> bool:
    return fake.token_requests == 0 and fake.sends == [] and fake.session_posts == [] and fake.session_refusals == 0


def test_a_buyer_with_a_staff_id_is_answered_by_batch_send_to_that_staff_id(
    store, ding, fake_dingtalk, api, credentials
):
    customer = receive(store, fake_dingtalk, "staff-1", staff=True)
    request = send_manual(store, ManualSend(request_id="r-staff", customer_id=customer, text="您好"))
    assert request.recipient_id == "staff-1"
    assert attempt(store, api, credentials, "r-staff") == "sent"
    [sent] = fake_dingtalk.sends
    assert sent.path == "/v1.0/robot/oToMessages/batchSend" and sent.user_ids == ["staff-1"]
    assert fake_dingtalk.session_posts == []  # the staff id wins over the session webhook


def test_only_a_sender_id_and_a_live_webhook_replies_through_the_webhook_without_read_tracking(
    store, ding, fake_dingtalk, api, credentials, caplog
):
    caplog.set_level(logging.DEBUG)
    customer = receive(store, fake_dingtalk, "guest-1", staff=False)
    with store.read() as conn:
        peer = conn.execute("SELECT direct_peer_id FROM customer WHERE id = ?", (customer,)).scalar_one()
    assert peer is None  # the encrypted senderId is never a recipient
    request = send_manual(
        store, ManualSend(request_id="r-hook", customer_id=customer, text="**您好**，请问有什么可以帮您")
    )
    assert request.recipient_id == REPLY_WEBHOOK
    grant = begin_attempt(store, "r-hook", "w", lease_s=60)
    assert isinstance(grant, AttemptGrant) and grant.send.reply_webhook is not None
    assert "sendBySession" not in repr(grant.send) and "sendBySession" not in str(grant.send)
    receipt = api.send(credentials, grant.send)
    record_sent(store, "r-hook", grant.attempt_no, receipt)

    [post] = fake_dingtalk.session_posts
    assert (post.conversation_id, post.body["msgtype"], post.text) == (
        "cid-guest-1",
        "markdown",
        "**您好**，请问有什么可以帮您",
    )
    assert fake_dingtalk.sends == [] and fake_dingtalk.token_requests == 0  # no batchSend, no token needed
    assert stored(store, "r-hook") == (REPLY_WEBHOOK, "sent", None, "session-webhook:r-hook")
    schedule_read_checks(store, "r-hook", 3, 1000, 0)  # what the pipeline asks after any 1:1 send
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM read_check").scalar_one() == 0  # no read status exists
    assert "sendBySession" not in caplog.text


def test_the_latest_webhook_is_used_and_an_expired_one_refuses_before_any_http_call(
    store, ding, fake_dingtalk, api, credentials
):
    customer = receive(store, fake_dingtalk, "guest-2", staff=False, webhook_ttl_s=-1)
    refused = send_manual(store, ManualSend(request_id="r-expired", customer_id=customer, text="您好"))
    assert (refused.state, refused.error_code) == ("failed", "DINGTALK_RECIPIENT_UNAVAILABLE")
    assert begin_attempt(store, "r-expired", "w", lease_s=60) == AttemptSkipped("settled")
    assert no_platform_call(fake_dingtalk)

    receive(store, fake_dingtalk, "guest-2", staff=False, n=2)  # the buyer writes again: a new webhook
    send_manual(store, ManualSend(request_id="r-fresh", customer_id=customer, text="您好"))
    assert attempt(store, api, credentials, "r-fresh") == "sent"
    assert [p.text for p in fake_dingtalk.session_posts] == ["您好"] and fake_dingtalk.session_refusals == 0


def test_a_webhook_that_expires_between_registration_and_attempt_sends_nothing(
    store, ding, fake_dingtalk, api, credentials
):
    customer = receive(store, fake_dingtalk, "guest-3", staff=False, webhook_ttl_s=60)  # live, margin 30 s
    send_manual(store, ManualSend(request_id="r-late", customer_id=customer, text="您好"))
    with store.write() as conn:  # an hour passes before the attempt: move the kept expiry back instead
        conn.execute(
            "UPDATE inbound_message SET reply_webhook = json_set(reply_webhook, '$.expires_at', ?)",
            (int(time.time() * 1000) - HOUR_MS,),
        )
    assert attempt(store, api, credentials, "r-late") == "rejected DINGTALK_RECIPIENT_UNAVAILABLE"
    assert stored(store, "r-late")[1:3] == ("failed", "DINGTALK_RECIPIENT_UNAVAILABLE")
    assert no_platform_call(fake_dingtalk)


def test_the_transport_refuses_a_webhook_send_without_a_live_webhook_or_with_media(fake_dingtalk, api, credentials):
    url = f"{fake_dingtalk.url}/robot/sendBySession?session=x"
    expired = ReplyWebhook(url=url, expires_at=datetime.now(UTC) - timedelta(seconds=1))
    nearly = ReplyWebhook(url=url, expires_at=datetime.now(UTC) + timedelta(seconds=10))  # inside the margin
    live = ReplyWebhook(url=url, expires_at=datetime.now(UTC) + timedelta(hours=1))
    image = MediaPayload(kind="image", mime="image/png", file_name="a.png", data=b"\x89PNG")
    for webhook, media, code in [
        (None, None, "DINGTALK_RECIPIENT_UNAVAILABLE"),
        (expired, None, "DINGTALK_RECIPIENT_UNAVAILABLE"),
        (nearly, None, "DINGTALK_RECIPIENT_UNAVAILABLE"),
        (live, image, "DINGTALK_SESSION_WEBHOOK_MEDIA_UNSUPPORTED"),
    ]:
        send = OutboundSend(
            request_id="r",
            account_id="ding",
            conversation_id="c",
            recipient_id=REPLY_WEBHOOK,
            text="a.png",
            media=media,
            reply_webhook=webhook,
        )
        with pytest.raises(SendFailure) as refused:
            api.send(credentials, send)
        assert (refused.value.kind, refused.value.code) == ("rejected", code)
        assert "session=x" not in str(refused.value)
    assert no_platform_call(fake_dingtalk) and fake_dingtalk.uploads == []


def test_the_fake_batch_send_refuses_a_sender_id_like_dingtalk(fake_dingtalk, api, credentials):
    """What the old rule (senderStaffId or senderId) did for a user outside the organisation."""
    send = OutboundSend(
        request_id="r", account_id="ding", conversation_id="c", recipient_id=sender_id_of("guest"), text="您好"
    )
    with pytest.raises(SendFailure) as refused:
        api.send(credentials, send)
    assert (refused.value.kind, refused.value.code) == ("rejected", "DINGTALK_INVALID_RECIPIENT")
    assert fake_dingtalk.sends == []


@pytest.mark.parametrize(
    ("peer", "webhook", "expected"),
    [
        ("staff-9", None, "staff-9"),
        ("staff-9", '{"reply_webhook":"https://x/s","expires_at":9000000}', "staff-9"),
        (None, '{"reply_webhook":"https://x/s","expires_at":9000000}', REPLY_WEBHOOK),
        ("$:LWCP_v1:$old", '{"reply_webhook":"https://x/s","expires_at":9000000}', REPLY_WEBHOOK),  # stored before
        (None, '{"reply_webhook":"https://x/s","expires_at":1020000}', None),  # within the 30 s margin
        ("$:LWCP_v1:$old", None, None),
        (None, "not json", None),
    ],
)
def test_the_rule_in_one_place(peer, webhook, expected):
    if expected is None:
        with pytest.raises(RecipientUnavailable) as refused:
            dingtalk_recipient("cid-1", peer, webhook, now=1_000_000)
        assert refused.value.code == "DINGTALK_RECIPIENT_UNAVAILABLE" and "https://" not in str(refused.value)
    else:
        assert dingtalk_recipient("cid-1", peer, webhook, now=1_000_000) == expected


def test_the_agent_reads_the_refusal_as_a_failed_reply(store, ding, fake_dingtalk):
    customer = receive(store, fake_dingtalk, "guest-4", staff=False, webhook_ttl_s=-1)
    evaluate(store, customer, 1000)
    with store.read() as conn:
        loaded, batch = load_customer(conn, customer), open_batch(conn, customer)
    binding = TurnBinding(store, loaded, batch, "s-1", 1, ZoneInfo("Asia/Shanghai"))
    outcome = execute(binding, ToolCall(id="c1", name="im_send_message", arguments='{"text": "您好"}'))
    assert outcome.is_error
    assert outcome.content.startswith(f"Error: IM reply failed (DINGTALK_RECIPIENT_UNAVAILABLE {outcome.request_id}):")
    assert "Do not use the conversation id as the recipient." in outcome.content
    assert no_platform_call(fake_dingtalk)
