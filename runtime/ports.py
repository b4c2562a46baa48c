"""The ports: what runtime needs from the outside world, and the values that cross them.

Runtime names no platform, broker or model vendor. A platform adapter (transports/) implements
`Transport`, a model adapter implements `ModelProvider`, and the shell (worker/) hands them to
the pipeline steps (runtime.pipeline) through `Services`. Everything a port takes or returns is
declared here, so an adapter needs this module and runtime.inbound.pages (the inbound page) only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from runtime.inbound.pages import Id, InboundPage, ReplyWebhook

if TYPE_CHECKING:
    from config import Settings
    from runtime.agent.profiles import AgentProfile
    from runtime.memory.engine import MemoryEngine
    from runtime.outbox.media import AttachmentPolicy
    from runtime.placement.shards import Placement
    from runtime.store import DeliveryStore

# --- sending -------------------------------------------------------------------------------


class MediaPayload(BaseModel):
    model_config = ConfigDict(frozen=True)
    kind: Literal["image", "file"]
    mime: str
    file_name: str
    data: bytes = Field(repr=False)


class OutboundSend(BaseModel):
    """What a transport is asked to deliver. `request_id` doubles as the client reference."""

    model_config = ConfigDict(frozen=True)
    request_id: str
    account_id: str
    conversation_id: str
    recipient_id: str | None
    text: str  # a media message's file name
    media: MediaPayload | None = None
    # With recipient_id REPLY_WEBHOOK (runtime.outbox.recipients): the conversation's latest reply
    # webhook still valid when the attempt began, or None when there is none (nothing may be sent).
    reply_webhook: ReplyWebhook | None = Field(None, repr=False)


class SendReceipt(BaseModel):
    model_config = ConfigDict(frozen=True)
    platform_message_id: str = Field(min_length=1)


class NeverReceived(BaseModel):
    """A receipt query's definitive answer that the platform never got the request (only from a
    platform that looks sends up by kefu's request id). An attempt older than the attempt lease
    can no longer arrive, so the request is free to be attempted again: nothing was delivered."""

    model_config = ConfigDict(frozen=True)


SendLookup = SendReceipt | NeverReceived | None  # None: the platform cannot tell

FailureKind = Literal["not-submitted", "rejected", "unknown"]


class SendFailure(Exception):
    """A transport's classified failure: safe to retry, final, or of unknown outcome.

    `retry_after_s` carries a platform's throttling hint for a not-submitted send.
    """

    def __init__(self, kind: FailureKind, code: str, retry_after_s: float | None = None) -> None:
        self.kind = kind
        self.code = code
        self.retry_after_s = retry_after_s
        super().__init__(f"{kind}: {code}")


# --- receiving -----------------------------------------------------------------------------


class BuyerReadReceipt(BaseModel):
    """A buyer read one of our messages (a DingTalk read-status answer, a Wangwang read push)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    account_id: Id
    conversation_id: Id
    platform_message_id: Id
    reader_id: Id
    read_at: AwareDatetime


class ListenerFailure(Exception):
    """A listening connection could not be opened or was lost. `code` is safe to show and
    store (never a secret, cursor or message text); `authorization` failures are final."""

    def __init__(self, code: str, authorization: bool = False) -> None:
        super().__init__(code)
        self.code = code
        self.authorization = authorization


def _nothing_to_ack() -> None:
    return None


@dataclass(frozen=True)
class Received:
    """One thing a connection delivered. `ack` tells the platform it is safe with us: call it
    right after the item is recorded and published (never later: a late ACK means
    redelivery), and never when that failed (then the platform must redeliver)."""

    item: InboundPage | BuyerReadReceipt
    ack: Callable[[], None] = field(default=_nothing_to_ack)


@dataclass(frozen=True)
class Heartbeat:
    """The platform's own keepalive (a ping frame, an empty poll): the connection is alive."""


class ListenerConnection(Protocol):
    def receive(self, timeout_s: float) -> Received | Heartbeat | None:
        """The next delivery or keepalive, or None when nothing came within `timeout_s`.
        Raises ListenerFailure when the connection is lost."""

    def close(self) -> None:
        """Close the connection; may be called from another thread, and more than once.
        Nothing received after closing is ever delivered."""


# --- the platform port ---------------------------------------------------------------------


class Transport(Protocol):
    """One IM platform. A transport sends, answers receipt queries, pages through history after
    a committed cursor (catch-up), and opens listening connections."""

    platform: str
    stream_id: str  # the provider stream whose cursor catch-up reads

    def send(self, message: OutboundSend) -> SendReceipt:
        """Deliver one message (`message.media` set: one file); raise SendFailure classified by
        outcome. `message.request_id` is the client reference: pass it to the platform where it
        takes one, and set it as `outbound_ref` on the platform's echo."""

    def query_send(self, account_id: str, request_id: str) -> SendLookup:
        """What became of an earlier send, by its request id: its receipt, NeverReceived when
        the platform can say for sure it never got it, or None when it cannot tell."""

    def page_after(self, account_id: str, cursor: str | None) -> InboundPage | None:
        """The next page of inbound messages after a committed cursor (catch-up), or None."""

    def confirm(self, account_id: str, cursor: str) -> None:
        """The page up to `cursor` is committed: the platform may forget it (where it keeps
        pages until told). Called after the commit, so a crash in between replays the page."""

    def connect(self, account_id: str, cursor: str | None) -> ListenerConnection:
        """Open a listening connection for the account, resuming after the committed cursor
        where the platform has one. Raises ListenerFailure."""

    def close(self) -> None:
        """Release what the transport holds (HTTP connection pools); listeners close their own."""


@runtime_checkable
class ReadStatusQueries(Protocol):
    """A transport whose platform answers read-status queries instead of pushing read events."""

    read_status_schedule: tuple[int, int]  # (1 to ask once per sent 1:1 message or 0 never, ms after the send)

    def read_by(self, account_id: str, platform_message_id: str) -> dict[str, int]:
        """Who read the message: reader id -> read time (ms, 0 if the platform gives none).
        Raises SendFailure when the platform cannot answer now."""


class MediaFetchFailure(Exception):
    """The platform did not hand out a buyer's media. `code` is safe to store; `transient`:
    worth another try later."""

    def __init__(self, code: str, transient: bool) -> None:
        super().__init__(code)
        self.code = code
        self.transient = transient


class MediaTooLarge(Exception):
    """The media is over the size limit: refused without reading it all."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


@runtime_checkable
class MediaDownloads(Protocol):
    """A transport whose platform hands out a buyer's media by the reference it paged."""

    def fetch_media(self, account_id: str, ref: str, max_bytes: int) -> bytes:
        """The media's bytes. Raises MediaTooLarge past `max_bytes` (read no further), and
        MediaFetchFailure when the platform cannot hand it out."""


# --- the model port ------------------------------------------------------------------------

# Marks the user message of a follow-up turn (after an interruption): it carries no buyer lines.
FOLLOW_UP_PREFIX = "[kefu follow-up]"
# Marks a notice that the buyer read one of our messages (SPEC 3.9): no buyer lines either.
READ_NOTICE_PREFIX = "[im-read]"


class ToolCall(BaseModel):
    id: str = Field(min_length=1)
    name: str
    arguments: str  # JSON text exactly as the model produced it; may be malformed


class ImageInput(BaseModel):
    """A buyer's image in a user message: the stored copy, its bytes loaded for the call."""

    sha256: str
    mime: str
    data: bytes = Field(b"", repr=False)


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCall] = []
    tool_call_id: str | None = None
    images: list[ImageInput] = []  # a user message's images (a vision model's view only)


class AssistantReply(BaseModel):
    text: str = ""
    tool_calls: list[ToolCall] = []
    usage: dict[str, Any] | None = None


class ToolSpec(BaseModel):
    name: str
    description: str
    parameters: dict[str, Any]


class ModelProvider(Protocol):
    """Chat messages in, one assistant reply (text and tool calls) out."""

    name: str

    def complete(self, messages: list[ChatMessage], tools: list[ToolSpec]) -> AssistantReply: ...


class ModelError(Exception):
    """One failed model call. `transient` failures (rate limits, 5xx, timeouts) are retried."""

    def __init__(
        self, code: str, transient: bool, status: int | None = None, retry_after_s: float | None = None
    ) -> None:
        self.code = code
        self.transient = transient
        self.status = status
        self.retry_after_s = retry_after_s  # the provider's Retry-After, bounded (a rate limit's)
        super().__init__(f"{code} (HTTP {status})" if status else code)


# --- what the shell hands to a step --------------------------------------------------------


class Services(Protocol):
    """The store and the adapters one process has built (worker.context.WorkerRuntime; a test
    builds its own around a MockTransport)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> DeliveryStore: ...

    @property
    def provider(self) -> ModelProvider: ...

    def agent_for(self, profile: str | None) -> tuple[AgentProfile, ModelProvider]:
        """The agent profile a route names (None: the default) and its model provider; raises
        runtime.agent.profiles.ProfileUnknown when no profile has that name."""

    @property
    def memory(self) -> MemoryEngine | None: ...

    @property
    def attachments(self) -> AttachmentPolicy | None: ...

    @property
    def transports(self) -> dict[str, Transport]: ...

    def transport_of(self, account_id: str) -> Transport:
        """The transport of the account's platform; KEFU_TRANSPORT_UNAVAILABLE if none."""

    def shard_of(self, account_id: str) -> str | None:
        """The shard the account directory places the account on (None: it does not know it)."""


class Coordination(Protocol):
    """What the hosts of a deployment share besides the broker (worker.coordination): the
    account directory and the move journal, with its blobs."""

    def placement(self, account_id: str) -> Placement | None: ...

    def place(self, placement: Placement, expected: Placement | None) -> bool:
        """Compare-and-set the account's entry: True when it was `expected` (None: absent)."""

    def journal(self, op_id: str) -> dict[str, Any] | None: ...

    def save_journal(self, op_id: str, record: dict[str, Any]) -> None: ...

    def put_blob(self, key: str, data: bytes, ttl_s: int | None = None) -> None: ...

    def blob(self, key: str) -> bytes | None: ...

    def drop_blob(self, key: str) -> None: ...

    def swap_journal(self, op_id: str, record: dict[str, Any], expected_version: int | None, is_open: bool) -> bool:
        """Write the record only if the stored one has `expected_version` (None: none is
        stored); `is_open` keeps the op id in the index of open moves, or takes it out."""

    def open_moves(self) -> list[str]:
        """Op ids of the moves not finished yet."""
