"""What the model sees of a session log: messages and tool traffic after the archived part,
under one system message that carries the memory sections. Never attempts or lifecycle events.

Pure over the log's events, so a restart rebuilds exactly the view (recall block included) the
model saw before it.
"""

from __future__ import annotations

from runtime.ports import ChatMessage, ToolCall
from runtime.session_log import MessageRead, SessionEvent, UserMessage

# Sessions started before the memory engine carry this placeholder in their system message.
LEGACY_MEMORY_SLOT = "\n\n[长期记忆]\n（暂无）"


def chat_message(event: SessionEvent) -> ChatMessage | None:
    """The event as the model sees it, or None for events the model never sees."""
    if isinstance(event, UserMessage | MessageRead):
        return ChatMessage(role="user", content=event.text)
    if event.type == "assistant/message":
        calls = [ToolCall(**c) for c in event.tool_calls]
        return ChatMessage(role="assistant", content=event.text, tool_calls=calls)
    if event.type == "tool/result":
        return ChatMessage(role="tool", content=event.content, tool_call_id=event.call_id)
    return None


def archived_upto(events: list[SessionEvent]) -> int:
    """Events before this seq (but the system message) are archived out of the model's view."""
    return next((e.upto for e in reversed(events) if e.type == "memory/archive"), 0)


def _memory_note(events: list[SessionEvent]) -> str | None:
    """The one merged `[memory] …` note of the session (cumulative segment count)."""
    return next((e.note for e in reversed(events) if e.type == "memory/archive"), None)


def recall_block(events: list[SessionEvent]) -> str:
    return next((e.text for e in reversed(events) if e.type == "memory/recall"), "")


def system_text(events: list[SessionEvent], judge_task: str = "") -> str | None:
    """The system message: the session's own prompt, then the memory note, the recall block
    and the scoring task (each only when there is one)."""
    first = next((e for e in events if e.type == "system/message"), None)
    if first is None:
        return None
    sections = [first.text.replace(LEGACY_MEMORY_SLOT, ""), _memory_note(events), recall_block(events), judge_task]
    return "\n\n".join(s for s in sections if s)


def model_view(events: list[SessionEvent], judge_task: str = "") -> list[ChatMessage]:
    messages: list[ChatMessage] = []
    system = system_text(events, judge_task)
    if system is not None:
        messages.append(ChatMessage(role="system", content=system))
    upto = archived_upto(events)
    for event in events:
        if event.seq >= upto and (message := chat_message(event)) is not None:
            messages.append(message)
    return messages
