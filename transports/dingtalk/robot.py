"""A DingTalk robot message (a Stream `CALLBACK` frame's data, or an HTTP callback's body) and
the one page it becomes.

DingTalk pushes messages one by one and keeps no history kefu could page through, so each
message is a page of its own whose operation id is derived from `msgId`: a redelivered
message is the same page again, and ingestion's dedupe makes it harmless.

A direct message's peer (who a reply goes to, runtime.outbox.recipients) is the sender's staff id
only: batchSend refuses the encrypted `senderId`. A sender without a staff id (outside the
organisation) brings the message's `sessionWebhook` instead, until `sessionWebhookExpiredTime`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.errors import PageRejected, validation_problems
from runtime.inbound.pages import (
    LATEST,
    Content,
    ConversationGroup,
    FileContent,
    ImageContent,
    InboundMessage,
    InboundPage,
    ReplyWebhook,
    Sender,
    TextContent,
    UnsupportedContent,
    VideoContent,
    VoiceContent,
    platform_time,
)

ROBOT_TOPIC = "/v1.0/im/bot/messages/get"
STREAM_ID = "dingtalk-robot"


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class RobotText(_Part):
    content: str = Field(max_length=65_536)


class RobotContent(_Part):
    """`content` of picture, richText, audio, video and file messages."""

    downloadCode: str | None = Field(None, min_length=1, max_length=1024)  # noqa: N815 (DingTalk's names)
    richText: list[dict[str, Any]] | None = Field(None, max_length=200)  # noqa: N815
    recognition: str | None = Field(None, max_length=65_536)  # an audio message, as DingTalk heard it
    duration: float | None = Field(None, ge=0)  # ms (audio), s (video)
    fileName: str | None = Field(None, min_length=1, max_length=256)  # noqa: N815


class RobotMessage(_Part):
    conversationId: str = Field(min_length=1, max_length=256)  # noqa: N815
    conversationType: Literal["1", "2"]  # noqa: N815 ("1" direct, "2" group)
    conversationTitle: str | None = Field(None, max_length=256)  # noqa: N815
    msgId: str = Field(min_length=1, max_length=256)  # noqa: N815
    msgtype: str = Field(min_length=1, max_length=64)
    createAt: int = Field(gt=0)  # noqa: N815 (ms)
    senderStaffId: str | None = Field(None, max_length=256)  # noqa: N815
    senderId: str | None = Field(None, max_length=256)  # noqa: N815
    senderNick: str | None = Field(None, max_length=256)  # noqa: N815
    isInAtList: bool | None = None  # noqa: N815
    # Where to post a reply to this conversation, until the expiry (ms). A credential: no repr.
    # Unchecked here: a malformed one is dropped (`_reply_webhook`), never the message with it.
    sessionWebhook: Any = Field(None, repr=False)  # noqa: N815
    sessionWebhookExpiredTime: Any = None  # noqa: N815
    robotCode: str | None = Field(None, max_length=128)  # noqa: N815
    text: RobotText | None = None
    content: RobotContent | None = None

    @property
    def sender_id(self) -> str | None:
        return self.senderStaffId or self.senderId


def parse_robot_message(data: Any) -> RobotMessage:
    """Validate a robot message; a bad one names its fields, never their values."""
    try:
        message = RobotMessage.model_validate(data)
    except ValidationError as error:
        raise PageRejected(validation_problems(error, "message")) from None
    if not message.sender_id:
        raise PageRejected(["senderStaffId: a robot message needs senderStaffId or senderId"])
    return message


def _content(message: RobotMessage) -> Content:
    if message.msgtype == "text" and message.text is not None:
        return TextContent(text=message.text.content.strip())
    content = message.content
    code = content.downloadCode if content is not None else None
    if message.msgtype == "picture" and code:
        return ImageContent(ref=code)  # fetched later with the download code
    if message.msgtype == "audio" and content is not None and (code or content.recognition):
        duration = int(content.duration) if content.duration is not None else None
        return VoiceContent(ref=code, recognition=content.recognition, duration_ms=duration)
    if message.msgtype == "video" and content is not None and code:
        duration = int(content.duration * 1000) if content.duration is not None else None  # DingTalk gives seconds
        return VideoContent(ref=code, duration_ms=duration)
    if message.msgtype == "file" and content is not None and code and content.fileName:
        return FileContent(ref=code, name=content.fileName)
    if message.msgtype == "richText" and message.content is not None and message.content.richText:
        parts = []
        for part in message.content.richText:
            if isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part.get("downloadCode"), str):
                parts.append(f"[image:{part['downloadCode']}]")  # a reference, never bytes
        return TextContent(text="".join(parts))
    return UnsupportedContent(platform_type=message.msgtype)


def _reply_webhook(message: RobotMessage) -> ReplyWebhook | None:
    """The session webhook of a direct message whose sender has no staff id (else None: a reply
    goes by batchSend, and the URL is not kept at all). One that is not an http(s) URL is ignored."""
    url, expires = message.sessionWebhook, message.sessionWebhookExpiredTime
    if message.conversationType != "1" or message.senderStaffId:
        return None
    if not isinstance(url, str) or not url.startswith(("https://", "http://")) or len(url) > 2048:
        return None
    if not isinstance(expires, int) or isinstance(expires, bool) or not 0 < expires < LATEST.timestamp() * 1000:
        return None  # (a page may carry no time from 2100 on: runtime.inbound.pages)
    return ReplyWebhook(url=url, expires_at=datetime.fromtimestamp(expires / 1000, tz=UTC))


def robot_page(account_id: str, message: RobotMessage) -> InboundPage:
    direct = message.conversationType == "1"
    sender_id = message.sender_id or ""
    inbound = InboundMessage(
        platform_message_id=message.msgId,
        sender=Sender(id=sender_id, display_name=message.senderNick, role="buyer"),
        content=_content(message),
        occurred_at=platform_time(message.createAt, "createAt"),
        mention=message.isInAtList,
        direct_peer_id=(message.senderStaffId or None) if direct else None,
        reply_webhook=_reply_webhook(message),
    )
    group = ConversationGroup(
        conversation_id=message.conversationId,
        conversation_type="direct" if direct else "group",
        title=None if direct else message.conversationTitle,
        messages=[inbound],
    )
    return InboundPage(
        account_id=account_id,
        stream_id=STREAM_ID,
        cursor=message.msgId,
        page_op_id=f"dingtalk-{message.msgId}",
        groups=[group],
    )
