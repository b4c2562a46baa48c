"""How much of the context window a step used: the provider's reported usage when it gives one,
else a deterministic estimate (the memory engine's archive trigger reads this)."""

from __future__ import annotations

import math
import unicodedata

from runtime.ports import AssistantReply, ChatMessage

PER_MESSAGE_TOKENS = 4  # role and framing


def text_tokens(text: str) -> int:
    # CJK ideographs are about one token each; other text about four characters per token.
    wide = sum(1 for ch in text if unicodedata.east_asian_width(ch) in ("W", "F"))
    return wide + math.ceil((len(text) - wide) / 4)


def estimate_tokens(messages: list[ChatMessage]) -> int:
    total = 0
    for message in messages:
        total += PER_MESSAGE_TOKENS + text_tokens(message.content)
        total += sum(text_tokens(c.name) + text_tokens(c.arguments) for c in message.tool_calls)
    return total


def context_use(messages: list[ChatMessage], reply: AssistantReply) -> tuple[int, str]:
    """(tokens in context after this reply, "provider" or "estimate")."""
    usage = reply.usage or {}
    if isinstance(usage.get("total_tokens"), int):
        return usage["total_tokens"], "provider"
    return estimate_tokens(
        [*messages, ChatMessage(role="assistant", content=reply.text, tool_calls=reply.tool_calls)]
    ), "estimate"
