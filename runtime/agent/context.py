"""How much of the context window a step used: the provider's reported usage when it gives one,
else a deterministic estimate (the memory engine's archive trigger reads this).

The estimate is additive over messages, so each event's share is counted once, into running
totals (SessionLog.folded), and a view's estimate is a difference: no step re-scores the
whole history.
"""

from __future__ import annotations

import math
import unicodedata
from functools import lru_cache

from runtime.agent.session_log import SessionEvent, SessionLog
from runtime.agent.view import archived_upto, chat_messages, system_text
from runtime.ports import AssistantReply, ChatMessage

PER_MESSAGE_TOKENS = 4  # role and framing


@lru_cache(maxsize=256)  # the system message, rebuilt for each step, is the same text
def text_tokens(text: str) -> int:
    # CJK ideographs are about one token each; other text about four characters per token.
    wide = sum(1 for ch in text if unicodedata.east_asian_width(ch) in ("W", "F"))
    return wide + math.ceil((len(text) - wide) / 4)


def message_tokens(message: ChatMessage) -> int:
    calls = sum(text_tokens(c.name) + text_tokens(c.arguments) for c in message.tool_calls)
    return PER_MESSAGE_TOKENS + text_tokens(message.content) + calls


def estimate_tokens(messages: list[ChatMessage]) -> int:
    return sum(map(message_tokens, messages))


def span_tokens(log: SessionLog, start: int, end: int) -> int:
    """The estimate of the messages of events [start, end), each counted from its message: a
    difference of running totals (SessionLog.folded), whatever the span's length."""
    messages = chat_messages(log)

    def add(totals: list[int], event: SessionEvent) -> None:
        message = messages[event.seq]
        totals.append(totals[-1] + (0 if message is None else message_tokens(message)))

    def difference(totals: list[int]) -> int:
        return totals[end] - totals[start]

    return log.folded("token-totals", lambda: [0], add, difference)


def view_tokens(log: SessionLog, judge_task: str = "") -> int:
    """The estimate of `model_view(log, judge_task)`, without building it."""
    system = system_text(log, judge_task)
    head = 0 if system is None else PER_MESSAGE_TOKENS + text_tokens(system)
    return head + span_tokens(log, archived_upto(log), log.offset)


def context_use(view_estimate: int, reply: AssistantReply) -> tuple[int, str]:
    """(tokens in context after this reply, "provider" or "estimate"), given the estimate of
    the view the reply answered."""
    usage = reply.usage or {}
    if isinstance(usage.get("total_tokens"), int):
        return usage["total_tokens"], "provider"
    answer = ChatMessage(role="assistant", content=reply.text, tool_calls=reply.tool_calls)
    return view_estimate + message_tokens(answer), "estimate"
