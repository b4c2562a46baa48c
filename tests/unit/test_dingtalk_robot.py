"""DingTalk robot messages become pages; HTTP callbacks are verified before anything is read."""

from __future__ import annotations

import json

import pytest

from runtime.errors import PageRejected
from runtime.inbound.ingest import ingest_page
from transports.dingtalk.callback import CallbackRejected, callback_signature, verify_callback
from transports.dingtalk.robot import parse_robot_message, robot_page

SECRET = "this is a secret"
NOW = 1577262236757


def robot(**changes) -> dict:
    message = {
        "conversationId": "cidGroup==",
        "conversationType": "2",
        "conversationTitle": "售后群",
        "msgId": "msgA1",
        "msgtype": "text",
        "text": {"content": " @机器人 退货地址是哪里 "},
        "createAt": NOW,
        "senderStaffId": "staff-7",
        "senderId": "$:LWCP_v1:$abc",
        "senderNick": "王五",
        "isInAtList": True,
        "robotCode": "ding-robot",
        "atUsers": [{"dingtalkId": "$:robot"}],
        "sessionWebhook": "https://oapi.dingtalk.com/robot/sendBySession?session=x",
    }
    message.update(changes)
    return {k: v for k, v in message.items() if v is not None}


def test_the_spec_test_vector_signs():
    assert callback_signature("1577262236757", SECRET) == "DJrE6qdyVGCQz9z5r2MDuNcNAhwYnuAkyj13cx169CA="


def test_a_group_message_maps_to_a_page_with_mention_evidence():
    page = robot_page("ding", parse_robot_message(robot()))
    [group] = page.groups
    [message] = group.messages
    assert (group.conversation_id, group.conversation_type, group.title) == ("cidGroup==", "group", "售后群")
    assert (message.platform_message_id, message.sender.id, message.sender.display_name) == ("msgA1", "staff-7", "王五")
    assert (message.mention, message.direct_peer_id, message.content.text) == (True, None, "@机器人 退货地址是哪里")
    assert message.occurred_at.timestamp() * 1000 == NOW
    assert (page.page_op_id, page.stream_id) == ("dingtalk-msgA1", "dingtalk-robot")


def test_a_direct_message_keeps_its_staff_id_as_peer_and_missing_mention_evidence_stays_missing():
    staff = robot(conversationType="1", isInAtList=None, conversationTitle=None, sessionWebhookExpiredTime=NOW + 1)
    [group] = robot_page("ding", parse_robot_message(staff)).groups
    [message] = group.messages
    assert group.conversation_type == "direct" and message.mention is None
    assert message.sender.id == message.direct_peer_id == "staff-7"
    assert message.reply_webhook is None  # a reply goes by batchSend: the webhook is not kept


def test_a_direct_sender_without_a_staff_id_has_no_peer_and_brings_the_session_webhook():
    external = robot(
        conversationType="1", senderStaffId=None, conversationTitle=None, sessionWebhookExpiredTime=NOW + 5_400_000
    )
    [message] = robot_page("ding", parse_robot_message(external)).groups[0].messages
    assert message.sender.id == "$:LWCP_v1:$abc"  # the identity in history; batchSend cannot use it
    assert message.direct_peer_id is None
    assert message.reply_webhook is not None
    assert message.reply_webhook.url == "https://oapi.dingtalk.com/robot/sendBySession?session=x"
    assert message.reply_webhook.expires_at.timestamp() * 1000 == NOW + 5_400_000
    assert "session=x" not in repr(message) and "session=x" not in repr(parse_robot_message(external))
    group = robot(senderStaffId=None, sessionWebhookExpiredTime=NOW + 5_400_000)
    assert robot_page("ding", parse_robot_message(group)).groups[0].messages[0].reply_webhook is None
    for broken in ({"sessionWebhook": "ftp://x"}, {"sessionWebhookExpiredTime": "soon"}, {"sessionWebhook": 7}):
        data = external | broken
        [kept] = robot_page("ding", parse_robot_message(data)).groups[0].messages  # the message is kept
        assert kept.reply_webhook is None


def test_pictures_keep_their_download_code_and_rich_text_keeps_references_only():
    picture = robot(msgtype="picture", text=None, content={"downloadCode": "dl-1", "pictureDownloadCode": "x"})
    rich = robot(msgtype="richText", text=None, content={"richText": [{"text": "看图"}, {"downloadCode": "dl-2"}]})
    audio = robot(msgtype="audio", text=None, content={"duration": 3})
    contents = [
        robot_page("ding", parse_robot_message(d)).groups[0].messages[0].content for d in (picture, rich, audio)
    ]
    assert contents[0].type == "image" and contents[0].ref == "dl-1"
    assert contents[1].type == "text" and contents[1].text == "看图[image:dl-2]"
    assert contents[2].type == "unsupported" and contents[2].platform_type == "audio"


def test_a_redelivered_message_is_the_same_page_and_ingests_once(store):
    from runtime.accounts.registry import AccountSpec, create_account

    create_account(store, AccountSpec(id="ding", platform="dingtalk", identity="ding-robot"))
    page = robot_page("ding", parse_robot_message(robot()))
    first, again = ingest_page(store, page), ingest_page(store, robot_page("ding", parse_robot_message(robot())))
    assert (first.rows_written, again.replayed) == (1, True)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (robot(conversationType="3"), "conversationType"),
        (robot(msgId=""), "msgId"),
        (robot(createAt="yesterday"), "createAt"),
        (robot(senderStaffId=None, senderId=None), "senderStaffId"),
        ("not an object", "RobotMessage"),
    ],
)
def test_a_malformed_robot_message_names_the_field_not_the_value(data, field):
    with pytest.raises(PageRejected) as rejected:
        parse_robot_message(data)
    problems = "; ".join(rejected.value.problems)
    assert field in problems or (field == "RobotMessage" and problems)
    assert "退货地址" not in problems and "yesterday" not in problems


def signed(timestamp: int, secret: str = SECRET) -> dict[str, str]:
    return {"timestamp": str(timestamp), "sign": callback_signature(str(timestamp), secret)}


def test_a_signed_fresh_callback_is_accepted():
    body = json.dumps(robot()).encode()
    assert verify_callback(signed(NOW), body, SECRET, now_ms=NOW + 60_000).msgId == "msgA1"


@pytest.mark.parametrize(
    ("headers", "body", "code"),
    [
        (signed(NOW, "another secret"), json.dumps(robot()).encode(), "DINGTALK_CALLBACK_BAD_SIGNATURE"),
        (signed(NOW - 3_600_001), json.dumps(robot()).encode(), "DINGTALK_CALLBACK_STALE"),
        (signed(NOW + 3_600_001), json.dumps(robot()).encode(), "DINGTALK_CALLBACK_STALE"),
        ({"timestamp": str(NOW)}, json.dumps(robot()).encode(), "DINGTALK_CALLBACK_UNSIGNED"),
        (signed(NOW), b"{not json", "DINGTALK_CALLBACK_MALFORMED"),
    ],
)
def test_bad_callbacks_are_refused_with_a_clear_code(headers, body, code):
    with pytest.raises(CallbackRejected) as refused:
        verify_callback(headers, body, SECRET, now_ms=NOW)
    assert refused.value.code == code and SECRET not in str(refused.value)


def test_voice_file_and_video_messages_keep_their_references_and_read_as_text(store):
    from runtime.accounts.registry import AccountSpec, create_account
    from runtime.agent.rendering import content_text

    voice = robot(
        msgtype="audio", text=None, content={"duration": 3200, "downloadCode": "dl-v", "recognition": "我要退货"}
    )
    file = robot(
        msgId="m2", msgtype="file", text=None, content={"downloadCode": "dl-f", "fileName": "发票.pdf", "spaceId": "1"}
    )
    video = robot(
        msgId="m3", msgtype="video", text=None, content={"duration": "12", "downloadCode": "dl-m", "videoType": "mp4"}
    )
    pages = [robot_page("ding", parse_robot_message(d)) for d in (voice, file, video)]
    contents = [page.groups[0].messages[0].content for page in pages]
    assert (contents[0].type, contents[0].recognition, contents[0].duration_ms) == ("voice", "我要退货", 3200)
    assert (contents[1].type, contents[1].ref, contents[1].name) == ("file", "dl-f", "发票.pdf")
    assert (contents[2].type, contents[2].duration_ms) == ("video", 12_000)
    create_account(store, AccountSpec(id="ding", platform="dingtalk", identity="ding-robot"))
    for page in pages:
        ingest_page(store, page)
    with store.read() as conn:
        rows = conn.execute("SELECT content_type, body FROM inbound_message ORDER BY id").all()
    assert [content_text(*row) for row in rows] == ["[voice 3 s] 我要退货", "[file 发票.pdf]", "[video 12 s]"]
