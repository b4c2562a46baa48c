"""The gateway's answers as pydantic models: a malformed answer is an error naming its field."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class GatewayError(_Answer):
    code: str = Field(min_length=1, max_length=64)
    msg: str | None = Field(None, max_length=1024)
    retry_after_s: float | None = Field(None, ge=0, le=3600)


class Identity(_Answer):
    seller_id: str = Field(min_length=1, max_length=256)
    seller_nick: str | None = None
    service_accounts: list[str] = []


class GatewayMessage(_Answer):
    message_id: str = Field(min_length=1, max_length=256)
    conversation_id: str = Field(min_length=1, max_length=256)
    conversation_type: Literal["direct", "group"] = "direct"
    sender_id: str = Field(min_length=1, max_length=256)
    sender_nick: str | None = Field(None, max_length=256)
    sender_role: Literal["buyer", "service"]
    content_type: str = Field(min_length=1, max_length=64)
    text: str | None = Field(None, max_length=65_536)
    media_id: str | None = Field(None, max_length=1024)
    sent_at: int = Field(gt=0)
    client_ref: str | None = Field(None, max_length=256)


class GatewayRead(_Answer):
    message_id: str = Field(min_length=1, max_length=256)
    conversation_id: str = Field(min_length=1, max_length=256)
    reader_id: str = Field(min_length=1, max_length=256)
    read_at: int = Field(gt=0)


class MessagesPage(_Answer):
    next_cursor: str | None = Field(None, max_length=4096)
    messages: list[GatewayMessage] = Field([], max_length=1000)
    reads: list[GatewayRead] = Field([], max_length=1000)


class Sent(_Answer):
    message_id: str = Field(min_length=1, max_length=256)


class SendLookup(_Answer):
    found: bool
    message_id: str | None = None


class Confirmed(_Answer):
    confirmed: bool


class MediaInfo(_Answer):
    """`media.get`: one inbound media item, described; its bytes are at `download_url`."""

    size: int = Field(ge=0)  # bytes, exactly what the download serves
    mime: str | None = Field(None, max_length=128)  # informational: kefu recognises images by their bytes
    download_url: str = Field(min_length=1, max_length=4096)  # short-lived; never logged
