"""The `rules` provider: a deterministic keyword FAQ that drives the same tool path as an LLM.

It reads the buyer lines of the latest admitted batch and answers each matching FAQ entry (or
a greeting) in one `im_send_message` call; an operator's direct message gets its answer as text
for the operator. When nothing matches it hands the customer to a
human (`im_handoff`) without replying: a pause revokes every unsent automatic reply anyway,
so the operator speaks next. The turn ends once the tools have results. No network, no
randomness.
"""

from __future__ import annotations

import json
import re
import tomllib
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from runtime.errors import KefuError
from runtime.ports import FOLLOW_UP_PREFIX, READ_NOTICE_PREFIX, AssistantReply, ChatMessage, ToolCall, ToolSpec

_LINE = re.compile(r"^\[[^\]]*\] \[counterpart(?: [^\]]*)?\] (?P<text>.*)$")
_LABELLED = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\] \[", re.MULTILINE)  # an IM line, of anyone


class FaqEntry(BaseModel):
    keywords: list[str] = Field(min_length=1)
    answer: str = Field(min_length=1)
    asks: bool = False  # the answer asks the buyer something (kept until the next turn sees it)


class Knowledge(BaseModel):
    greeting_keywords: list[str] = []
    greeting: str = Field(min_length=1)
    handoff_reason: str = Field(min_length=1, max_length=500)
    faq: list[FaqEntry] = []


def load_knowledge(path: Path | None, variable: str = "KEFU_AGENT__KNOWLEDGE_FILE") -> Knowledge:
    """Load the FAQ file (the shipped sample when `path` is None); errors name the file and the
    `variable` that names it (a profile's own, runtime.agent.profiles)."""
    source = str(path) if path else "the shipped sample FAQ"
    try:
        if path is None:
            raw = resources.files("runtime.agent").joinpath("knowledge/sample_faq.toml").read_text("utf-8")
        else:
            raw = Path(path).read_text("utf-8")
        return Knowledge.model_validate(tomllib.loads(raw))
    except (OSError, tomllib.TOMLDecodeError, ValidationError) as error:
        raise KefuError("KEFU_KNOWLEDGE_INVALID", f"cannot load {source}: {error}", f"fix {variable}") from None


class RulesProvider:
    name = "rules"

    def __init__(self, knowledge: Knowledge) -> None:
        self.knowledge = knowledge

    def answer(self, buyer_lines: list[str]) -> str | None:
        """The reply to these lines, or None when nothing matches (a human should answer)."""
        found = self._matches(buyer_lines)
        return found[0] if found else None

    def _matches(self, buyer_lines: list[str]) -> tuple[str, bool] | None:
        """The reply and whether it asks the buyer something, or None when nothing matches."""
        answers: list[FaqEntry] = []
        greeted = False
        for line in buyer_lines:
            lowered = line.lower()
            matched = [e for e in self.knowledge.faq if any(k.lower() in lowered for k in e.keywords)]
            if matched:
                answers.extend(e for e in matched if e not in answers)
            elif any(k.lower() in lowered for k in self.knowledge.greeting_keywords):
                greeted = True
        if answers:
            return "\n".join(e.answer for e in answers), any(e.asks for e in answers)
        return (self.knowledge.greeting, False) if greeted else None

    def complete(self, messages: list[ChatMessage], tools: list[ToolSpec]) -> AssistantReply:
        # Read notices carry no buyer lines: the reply is about the latest batch or follow-up.
        last_user = next(
            (
                i
                for i in range(len(messages) - 1, -1, -1)
                if messages[i].role == "user" and not messages[i].content.startswith(READ_NOTICE_PREFIX)
            ),
            None,
        )
        if last_user is None:
            return AssistantReply(text="(no customer input)")
        if any(m.role == "tool" for m in messages[last_user + 1 :]):
            return AssistantReply(text="已回复顾客。")
        # A follow-up turn answers the batch whose turn was interrupted: the latest buyer batch.
        end = next(
            i
            for i in range(last_user, -1, -1)
            if messages[i].role == "user" and not messages[i].content.startswith((FOLLOW_UP_PREFIX, READ_NOTICE_PREFIX))
        )
        start = end
        while start > 0 and messages[start - 1].role == "user":  # a batch may span user messages
            start -= 1
        inputs = [m.content for m in messages[start : end + 1] if not m.content.startswith(READ_NOTICE_PREFIX)]
        lines = [match["text"] for text in inputs for line in text.splitlines() if (match := _LINE.match(line))]
        to_operator = self._to_operator([text for text in inputs if not _LABELLED.search(text)])
        if not lines:
            return AssistantReply(text=to_operator or "本批次没有顾客消息，无需回复。")
        found = self._matches(lines)
        if found is None:
            if tools and not any(tool.name == "im_handoff" for tool in tools):  # the profile allows no handoff
                return AssistantReply(text=to_operator or "无匹配答案；这个客服设定不能转人工，未回复顾客。")
            reason = json.dumps({"reason": self.knowledge.handoff_reason}, ensure_ascii=False)
            handoff = ToolCall(id=f"rules-{len(messages)}", name="im_handoff", arguments=reason)
            return AssistantReply(text=to_operator or "无匹配答案，转人工。", tool_calls=[handoff])
        send = ToolCall(
            id=f"rules-{len(messages)}",
            name="im_send_message",
            arguments=json.dumps(
                {"text": found[0], **({"awaits_answer": True} if found[1] else {})}, ensure_ascii=False
            ),
        )
        return AssistantReply(text=to_operator, tool_calls=[send])

    def _to_operator(self, messages: list[str]) -> str:
        """An operator's direct messages (no time or label) are answered to the operator, never
        sent: with what the FAQ would tell a buyer who asked the same."""
        if not messages:
            return ""
        answer = self.answer(messages)
        if answer is None:
            return "（回复运营人员）知识库里没有匹配的答案，顾客这样问时我会转人工。"
        return f"（回复运营人员）顾客这样问时，我会回答：{answer}"
