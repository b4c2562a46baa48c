"""The model boundary: chat messages in, one assistant reply (text and tool calls) out."""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

# Marks the user message of a follow-up turn (after an interruption): it carries no buyer lines.
FOLLOW_UP_PREFIX = "[kefu follow-up]"
# Marks a notice that the buyer read one of our messages (SPEC 3.9): no buyer lines either.
READ_NOTICE_PREFIX = "[im-read]"


class ToolCall(BaseModel):
    id: str = Field(min_length=1)
    name: str
    arguments: str  # JSON text exactly as the model produced it; may be malformed


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCall] = []
    tool_call_id: str | None = None


class AssistantReply(BaseModel):
    text: str = ""
    tool_calls: list[ToolCall] = []
    usage: dict[str, Any] | None = None


class ToolSpec(BaseModel):
    name: str
    description: str
    parameters: dict[str, Any]


class ModelProvider(Protocol):
    name: str

    def complete(self, messages: list[ChatMessage], tools: list[ToolSpec]) -> AssistantReply: ...


class ModelError(Exception):
    """One failed model call. `transient` failures (rate limits, 5xx, timeouts) are retried."""

    def __init__(self, code: str, transient: bool, status: int | None = None) -> None:
        self.code = code
        self.transient = transient
        self.status = status
        super().__init__(f"{code} (HTTP {status})" if status else code)
