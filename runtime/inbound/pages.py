"""What a transport hands to kefu: one page of provider messages grouped by conversation."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, model_validator

from runtime.errors import PageRejected, validation_problems
from runtime.store.clock import now_ms

log = logging.getLogger(__name__)

Id = Annotated[str, Field(min_length=1, max_length=256)]

# The times a page may carry. Every later step must handle a page's time: the shop's time zone
# (a date near year 1 or 9999 overflows there), ms-epoch integers in SQLite, day arithmetic,
# formatting and JSON. A platform message from before 1970 or after 2100 is a platform's or a
# transport's bug, never a buyer's real time; refused at the door, with the field named, so no
# such value is ever stored and no turn can fail on it.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)
MAX_DURATION_MS = 2_147_483_647  # a signed 32-bit int: ≈ 24.8 days, far beyond any voice or video


def _representable(value: datetime) -> datetime:
    if not EARLIEST <= value < LATEST:
        raise ValueError(f"KEFU_PAGE_TIME_OUT_OF_RANGE: must lie in [{EARLIEST:%Y-%m-%d}, {LATEST:%Y-%m-%d}) UTC")
    return value


PageTime = Annotated[AwareDatetime, AfterValidator(_representable)]
DurationMs = Annotated[int, Field(ge=0, le=MAX_DURATION_MS)]


def platform_time(ms: float, field: str) -> datetime:
    """A platform's ms-epoch time as a page carries it. A value no later step could handle
    (before 1970, from 2100 on, not a finite number) is clamped to now, the time kefu
    received it, with a warning naming the field: leaving the message out would lose a buyer's
    words over a broken platform clock, and a page refused whole would stop its account's
    stream at that page for ever. Never logs the value's message."""
    try:
        at = datetime.fromtimestamp(ms / 1000, tz=UTC)
        return _representable(at)
    except (ValueError, OverflowError, OSError, TypeError):
        log.warning("KEFU_PAGE_TIME_OUT_OF_RANGE: %s is not a time kefu can keep; taken as received now", field)
        return datetime.fromtimestamp(now_ms() / 1000, tz=UTC)


ConversationType = Literal["direct", "group"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Sender(_Model):
    id: Id
    display_name: str | None = Field(None, max_length=256)
    # Role evidence from the provider: a native-client operator of the shop, or a buyer.
    role: Literal["buyer", "native_operator", "unknown"] = "unknown"


class TextContent(_Model):
    type: Literal["text"] = "text"
    text: str = Field(max_length=65_536)


class MarkdownContent(_Model):
    type: Literal["markdown"] = "markdown"
    title: str | None = Field(None, max_length=256)
    text: str = Field(max_length=65_536)


class ImageContent(_Model):
    type: Literal["image"] = "image"
    ref: Id  # provider download code or media id; never inline bytes


class FileContent(_Model):
    type: Literal["file"] = "file"
    ref: Id  # provider download code
    name: str = Field(min_length=1, max_length=256)


class VoiceContent(_Model):
    type: Literal["voice"] = "voice"
    ref: Id | None = None
    recognition: str | None = Field(None, max_length=65_536)  # the platform's own speech-to-text
    duration_ms: DurationMs | None = None


class VideoContent(_Model):
    type: Literal["video"] = "video"
    ref: Id
    duration_ms: DurationMs | None = None


class UnsupportedContent(_Model):
    type: Literal["unsupported"] = "unsupported"
    platform_type: Id


Content = Annotated[
    TextContent | MarkdownContent | ImageContent | FileContent | VoiceContent | VideoContent | UnsupportedContent,
    Field(discriminator="type"),
]


class ReplyWebhook(_Model):
    """A URL the platform gave with a message to post a reply into its conversation, until
    `expires_at` (DingTalk's `sessionWebhook`). The URL is the credential: it never appears in a
    repr, a log or an error; it is kept with the stored message only (runtime.outbox.recipients)."""

    url: str = Field(min_length=1, max_length=2048, pattern=r"^https?://", repr=False)
    expires_at: PageTime


class InboundMessage(_Model):
    platform_message_id: Id
    sender: Sender
    content: Content
    occurred_at: PageTime
    mention: bool | None = None  # None: the provider gave no mention evidence
    direct_peer_id: Id | None = None
    # Set on the platform's echo of a message kefu sent: the client reference kefu gave it
    # (its outbox request id). Transports set it only when the platform returns that reference.
    outbound_ref: Id | None = None
    # Direct conversations only, set by a transport whose platform lets a reply reach this sender
    # no other way (a DingTalk user without a staff id): where to post a reply, for a while.
    reply_webhook: ReplyWebhook | None = Field(None, repr=False)


class ConversationGroup(_Model):
    conversation_id: Id
    conversation_type: ConversationType
    title: str | None = Field(None, max_length=256)
    messages: list[InboundMessage] = Field(min_length=1, max_length=1000)

    @model_validator(mode="after")
    def _one_content_per_message_id(self) -> ConversationGroup:
        """A platform repeating a message in one page is deduped; one id with two different
        contents is a broken page, and which one is true cannot be told: reject it whole."""
        seen: dict[str, InboundMessage] = {}
        for index, message in enumerate(self.messages):
            first = seen.setdefault(message.platform_message_id, message)
            if first is not message and first != message:
                raise ValueError(f"messages.{index}.platform_message_id: repeats an earlier message with other content")
        return self


class InboundPage(_Model):
    account_id: Id
    stream_id: Id
    # Provider cursor after this page. Opaque and private: kept out of reprs and logs.
    cursor: str = Field(min_length=1, max_length=4096, repr=False)
    page_op_id: Id
    groups: list[ConversationGroup] = Field(max_length=1000)

    @model_validator(mode="after")
    def _one_group_per_conversation(self) -> InboundPage:
        seen: set[str] = set()
        for index, group in enumerate(self.groups):
            if group.conversation_id in seen:
                raise ValueError(f"groups.{index}.conversation_id: conversation appears in two groups")
            seen.add(group.conversation_id)
        return self

    @property
    def message_count(self) -> int:
        return sum(len(group.messages) for group in self.groups)


def parse_page(data: Any) -> InboundPage:
    """Validate a page; on failure name each bad field (never echo its value: it may be a body)."""
    try:
        return InboundPage.model_validate(data)
    except ValidationError as error:
        raise PageRejected(validation_problems(error, "page")) from None
