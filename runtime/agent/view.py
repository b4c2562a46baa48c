"""What the model sees of a session log: messages and tool traffic after the archived part,
under one system message that carries the memory sections. Never attempts or lifecycle events.

Pure over the log's events, so a restart rebuilds exactly the view (recall block included) the
model saw before it. Each event's message is made once (SessionLog.derived), the sections are
found by type (SessionLog.last), and the messages after the archived part are a fold over the
events (SessionLog.folded), so a step adds only the events new since the last one: building
the view costs the same on a session's thousandth turn as on its tenth.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field

from runtime.agent.session_log import (
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
from runtime.ports import ChatMessage, ImageInput, ToolCall

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


def model_view(
    log: SessionLog,
    judge_task: str = "",
    image_rounds: int = 0,
    load_images: Callable[[list[ChatMessage]], list[ChatMessage]] = lambda messages: messages,
) -> list[ChatMessage]:
    """`image_rounds`: the last turns whose buyers' images the model sees as images (0: none;
    an older or unseen image is the `[image]` its text says). `load_images`: the messages that
    show images, made ready for the call (runtime.inbound.media.with_image_data)."""
    system = system_text(log, judge_task)
    head = [] if system is None else [ChatMessage(role="system", content=system)]
    chat = chat_messages(log)

    def take(state: _Visible, event: SessionEvent) -> None:
        state.take(chat, event)

    def read(state: _Visible) -> tuple[list[ChatMessage], list[tuple[int, int]]]:
        return state.shown(head)

    messages, with_images = log.folded("view", _Visible, take, read)
    starts = log.of_type("turn/start")
    since = starts[max(len(starts) - image_rounds, 0)].seq if image_rounds and starts else log.offset
    recent = [(position, seq) for position, seq in with_images if seq >= since]
    shown = [message for _, seq in recent if (message := chat[seq]) is not None]  # each one is a message
    for (position, _), message in zip(recent, load_images(shown), strict=True):
        messages[position] = message
    return messages


@dataclass
class _Visible:
    """The model's messages of a log's events from `start` (the archived part's end: an archive
    only ever moves it on), each without its images (model_view puts back the recent ones'), as
    SessionLog.folded keeps them: a step adds only the events since the last."""

    start: int = 0
    seqs: list[int] = field(default_factory=list)
    messages: list[ChatMessage] = field(default_factory=list)
    with_images: list[int] = field(default_factory=list)  # seqs of the messages that carry images

    def take(self, chat: list[ChatMessage | None], event: SessionEvent) -> None:
        if isinstance(event, MemoryArchive):  # what it archived leaves the view
            cut = bisect_left(self.seqs, event.upto)
            del self.seqs[:cut], self.messages[:cut]
            self.with_images = [seq for seq in self.with_images if seq >= event.upto]
            self.start = event.upto
        message = chat[event.seq]
        if message is None or event.seq < self.start:
            return
        if message.images:
            self.with_images.append(event.seq)
            message = message.model_copy(update={"images": []})
        self.seqs.append(event.seq)
        self.messages.append(message)

    def shown(self, head: list[ChatMessage]) -> tuple[list[ChatMessage], list[tuple[int, int]]]:
        """`head` and the messages, a list of the caller's own, and (position, seq) of each
        message that carries images."""
        at = len(head)
        return head + self.messages, [(at + bisect_left(self.seqs, seq), seq) for seq in self.with_images]
