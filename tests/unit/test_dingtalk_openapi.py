"""The DingTalk OpenAPI client against the local fake_dingtalk over real HTTP: tokens, sends, the
classification of every failure, media, read status."""

from __future__ import annotations

import json
import socket

import pytest

from config import DingTalkSettings
from runtime.ports import MediaFetchFailure, MediaPayload, MediaTooLarge, OutboundSend, SendFailure
from tests.fakes.dingtalk import FakeDingTalk
from transports.dingtalk import DingTalkCredentials
from transports.dingtalk.openapi import DingTalkOpenAPI

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def api_for(fake_dingtalk: FakeDingTalk, timeout_s: float = 5.0) -> DingTalkOpenAPI:
    return DingTalkOpenAPI(
        DingTalkSettings(openapi_url=fake_dingtalk.url, oapi_url=fake_dingtalk.url, timeout_s=timeout_s)
    )


def direct(text: str = "您好", to: str | None = "staff-1", request_id: str = "r1", **extra) -> OutboundSend:
    return OutboundSend(
        request_id=request_id, account_id="ding", conversation_id="cid-1", recipient_id=to, text=text, **extra
    )


def failure_of(call) -> SendFailure:
    with pytest.raises(SendFailure) as failed:
        call()
    return failed.value


def test_a_direct_send_uses_batch_send_and_the_query_key_is_the_platform_id(fake_dingtalk, credentials):
    receipt = api_for(fake_dingtalk).send(credentials, direct("发货了"))
    [sent] = fake_dingtalk.sends
    assert sent.path == "/v1.0/robot/oToMessages/batchSend"
    assert (sent.body["robotCode"], sent.user_ids, sent.body["msgKey"], sent.text) == (
        "ding-robot",
        ["staff-1"],
        "sampleText",
        "发货了",
    )
    assert receipt.platform_message_id == sent.process_query_key


def test_a_group_send_goes_to_the_conversation(fake_dingtalk, credentials):
    api_for(fake_dingtalk).send(credentials, direct(to=None))
    [sent] = fake_dingtalk.sends
    assert sent.path == "/v1.0/robot/groupMessages/send" and sent.body["openConversationId"] == "cid-1"


def test_the_token_is_cached_until_five_minutes_before_it_expires(credentials):
    long_lived, short_lived = FakeDingTalk(token_expires_in=7200).start(), FakeDingTalk(token_expires_in=300).start()
    try:
        for fake_dingtalk in (long_lived, short_lived):
            api = api_for(fake_dingtalk)
            for n in range(3):
                api.send(credentials, direct(request_id=f"r{n}"))
        assert (long_lived.token_requests, short_lived.token_requests) == (1, 3)
    finally:
        long_lived.stop()
        short_lived.stop()


def test_a_token_refused_by_the_api_is_refreshed_once(fake_dingtalk, credentials):
    api = api_for(fake_dingtalk)
    api.send(credentials, direct(request_id="r1"))
    fake_dingtalk.revoke_tokens()
    api.send(credentials, direct(request_id="r2"))
    assert fake_dingtalk.token_requests == 2 and len(fake_dingtalk.sends) == 2


def test_wrong_credentials_are_rejected_as_an_authorization_failure(fake_dingtalk):
    wrong = DingTalkCredentials(
        client_id=fake_dingtalk.client_id, client_secret="not-it", robot_code=fake_dingtalk.robot_code
    )
    failed = failure_of(lambda: api_for(fake_dingtalk).send(wrong, direct()))
    assert (failed.kind, failed.code) == ("rejected", "DINGTALK_AUTH_FAILED") and fake_dingtalk.sends == []
    assert "not-it" not in str(failed)


def test_throttling_is_not_submitted_with_a_backoff_hint_and_nothing_was_sent(fake_dingtalk, credentials):
    fake_dingtalk.throttle_sends = 1
    failed = failure_of(lambda: api_for(fake_dingtalk).send(credentials, direct()))
    assert (failed.kind, failed.code, failed.retry_after_s) == ("not-submitted", "DINGTALK_THROTTLED", 1.0)
    assert fake_dingtalk.sends == []
    api_for(fake_dingtalk).send(credentials, direct())
    assert len(fake_dingtalk.sends) == 1


def test_a_timeout_after_the_request_left_is_unknown(fake_dingtalk, credentials):
    fake_dingtalk.stall_sends, fake_dingtalk.stall_s = 1, 1.5
    failed = failure_of(lambda: api_for(fake_dingtalk, timeout_s=0.5).send(credentials, direct()))
    assert (failed.kind, failed.code) == ("unknown", "DINGTALK_NO_RESPONSE_ReadTimeout")
    assert len(fake_dingtalk.sends) == 1  # DingTalk has it


def test_an_unreachable_platform_is_not_submitted(credentials):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once closed
    api = DingTalkOpenAPI(DingTalkSettings(openapi_url=f"http://127.0.0.1:{port}", timeout_s=2))
    failed = failure_of(lambda: api.send(credentials, direct()))
    assert failed.kind == "not-submitted" and failed.code.startswith("DINGTALK_UNREACHABLE")


def test_invalid_and_flow_controlled_recipients_are_not_a_success(fake_dingtalk, credentials):
    fake_dingtalk.invalid_users, fake_dingtalk.flow_controlled_users = {"gone"}, {"busy"}
    invalid = failure_of(lambda: api_for(fake_dingtalk).send(credentials, direct(to="gone")))
    limited = failure_of(lambda: api_for(fake_dingtalk).send(credentials, direct(to="busy")))
    assert (invalid.kind, invalid.code) == ("rejected", "DINGTALK_INVALID_RECIPIENT")
    assert (limited.kind, limited.code, limited.retry_after_s) == ("not-submitted", "DINGTALK_FLOW_CONTROLLED", 60.0)
    assert fake_dingtalk.sends == []


def test_an_unknown_robot_is_rejected_with_dingtalks_code(fake_dingtalk):
    other = DingTalkCredentials(
        client_id=fake_dingtalk.client_id, client_secret=fake_dingtalk.client_secret, robot_code="nope"
    )
    failed = failure_of(lambda: api_for(fake_dingtalk).send(other, direct()))
    assert (failed.kind, failed.code) == ("rejected", "DINGTALK_robot.not.exist")


def test_an_image_is_uploaded_then_sent_by_its_media_id(fake_dingtalk, credentials):
    image = MediaPayload(kind="image", mime="image/png", file_name="尺码表.png", data=PNG)
    api_for(fake_dingtalk).send(credentials, direct(text="尺码表.png", media=image))
    [sent] = fake_dingtalk.sends
    assert sent.body["msgKey"] == "sampleImageMsg" and '"photoURL": "@media-1"' in sent.body["msgParam"]
    assert fake_dingtalk.uploads and fake_dingtalk.uploads[0] > len(PNG)


def test_read_status_names_the_readers(fake_dingtalk, credentials):
    api = api_for(fake_dingtalk)
    key = api.send(credentials, direct(to="staff-9")).platform_message_id
    assert api.read_by(credentials, key) == {}
    fake_dingtalk.mark_read(key, "staff-9")
    assert list(api.read_by(credentials, key)) == ["staff-9"]


def test_a_reply_with_markdown_goes_as_sample_markdown_with_a_plain_title(fake_dingtalk, credentials):
    api = api_for(fake_dingtalk)
    api.send(credentials, direct("## 发货说明\n- 现货 **48 小时**内发出\n- 预售 7 天"))
    api.send(credentials, direct("订单 A1001 今天发货。", request_id="r2"))
    markdown, plain = fake_dingtalk.sends
    assert markdown.body["msgKey"] == "sampleMarkdown"
    assert json.loads(markdown.body["msgParam"]) == {
        "title": "发货说明",
        "text": "## 发货说明\n- 现货 **48 小时**内发出\n- 预售 7 天",
    }
    assert plain.body["msgKey"] == "sampleText" and plain.text == "订单 A1001 今天发货。"


def test_a_buyers_file_is_downloaded_by_its_code_within_the_size_limit(fake_dingtalk, credentials):
    api = api_for(fake_dingtalk)
    fake_dingtalk.files["code-1"] = b"\x89PNG\r\n\x1a\n" + b"\x00" * 100
    assert api.download(credentials, "code-1", 1000) == fake_dingtalk.files["code-1"]
    with pytest.raises(MediaTooLarge) as too_large:
        api.download(credentials, "code-1", 50)
    assert too_large.value.size == 108  # refused by its declared length, before reading it
    with pytest.raises(MediaFetchFailure) as unknown:
        api.download(credentials, "no-such-code", 1000)
    assert not unknown.value.transient and unknown.value.code.startswith("DINGTALK_")


@pytest.mark.parametrize(
    ("answer", "code", "hint"),
    [
        ((429, {"code": "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi"}), "DINGTALK_THROTTLED", 1.0),
        ((503, {"code": "ServiceUnavailable"}), "DINGTALK_TOKEN_UNAVAILABLE", None),
    ],
)
def test_a_token_endpoint_that_throttles_or_fails_is_not_a_credentials_problem(
    fake_dingtalk, credentials, answer, code, hint
):
    """Only a refused token is DINGTALK_AUTH_FAILED; the send is tried again, as its own code says."""
    fake_dingtalk.token_answers = [answer]
    failed = failure_of(lambda: api_for(fake_dingtalk).send(credentials, direct()))
    assert (failed.kind, failed.code) == ("not-submitted", code) and fake_dingtalk.sends == []
    assert failed.retry_after_s == hint  # throttled: DingTalk's hint (no Retry-After: the default 1 s)
    api_for(fake_dingtalk).send(credentials, direct())
    assert len(fake_dingtalk.sends) == 1
