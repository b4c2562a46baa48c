"""What the model sees of a session log: messages and tool traffic after the archived part,
under one system message that carries the memory sections. Never attempts or lifecycle events.

Pure over the log's events, so a restart rebuilds exactly the view (recall block included) the
model saw before it. Each event's message is made once (SessionLog.derived) and the sections
are found by type (SessionLog.last), so building the view costs the same on a session's
thousandth turn as on its tenth.
"""

from __future__ import annotations

from runtime.ports import ChatMessage, ImageInput, ToolCall
from runtime.session_log import (
    AssistantMessage,
    DeveloperMessage,
    MemoryArchive,
    MemoryRecall,
    MessageRead,
    SessionEvent,
    SessionLog,
    SystemMessage,
    ToolResult,
    UserMessage,
)

# Sessions started before the memory engine carry this placeholder in their system message.
LEGACY_MEMORY_SLOT = "\n\n[长期记忆]\n（暂无）"


def chat_message(event: SessionEvent) -> ChatMessage | None:
    """The event as the model sees it, or None for events the model never sees."""
    if isinstance(event, UserMessage):
        return ChatMessage(role="user", content=event.text, images=[ImageInput(**image) for image in event.images])
    if isinstance(event, MessageRead):
        return ChatMessage(role="user", content=event.text)
    if isinstance(event, AssistantMessage):
        calls = [ToolCall(**c) for c in event.tool_calls]
        return ChatMessage(role="assistant", content=event.text, tool_calls=calls)
    if isinstance(event, ToolResult):
        return ChatMessage(role="tool", content=event.content, tool_call_id=event.call_id)
    if isinstance(event, DeveloperMessage):  # a user message: not every provider takes a late system one
        return ChatMessage(role="user", content=event.text)
    return None  # lifecycle, attempts, memory bookkeeping, extension events


def chat_messages(log: SessionLog) -> list[ChatMessage | None]:
    """Each event's message (or None), by seq."""
    return log.derived("chat", chat_message)


def _last_archive(log: SessionLog) -> MemoryArchive | None:
    last = log.last("memory/archive")
    return last if isinstance(last, MemoryArchive) else None


def archived_upto(log: SessionLog) -> int:
    """Events before this seq (but the system message) are archived out of the model's view."""
    last = _last_archive(log)
    return last.upto if last else 0


def recall_block(log: SessionLog) -> str:
    last = log.last("memory/recall")
    return last.text if isinstance(last, MemoryRecall) else ""


def system_text(log: SessionLog, judge_task: str = "") -> str | None:
    """The system message: the session's own prompt, then the memory note (the one merged
    `[memory] …` note, cumulative segment count), the recall block and the scoring task (each
    only when there is one)."""
    first = next(iter(log.of_type("system/message")), None)
    if not isinstance(first, SystemMessage):
        return None
    archive = _last_archive(log)
    note = archive.note if archive else None
    sections = [first.text.replace(LEGACY_MEMORY_SLOT, ""), note, recall_block(log), judge_task]
    return "\n\n".join(s for s in sections if s)


def model_view(log: SessionLog, judge_task: str = "", image_rounds: int = 0) -> list[ChatMessage]:
    """`image_rounds`: the last turns whose buyers' images the model sees as images (0: none;
    an older or unseen image is the `[image]` its text says)."""
    messages: list[ChatMessage] = []
    system = system_text(log, judge_task)
    if system is not None:
        messages.append(ChatMessage(role="system", content=system))
    starts = log.of_type("turn/start")
    since = starts[max(len(starts) - image_rounds, 0)].seq if image_rounds and starts else len(log.events)
    for seq, message in enumerate(chat_messages(log)[archived_upto(log) :], start=archived_upto(log)):
        if message is not None:
            messages.append(
                message if seq >= since or not message.images else message.model_copy(update={"images": []})
            )
    return messages
