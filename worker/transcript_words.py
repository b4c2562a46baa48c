"""A transcript line in words, in the operator's language: who wrote it, and what a note of the
agent's says. The console's pages and `kefu history` both read a conversation this way, each
with the gettext of its own catalog (worker.i18n; these msgids are in both, and both catalogs'
tests read this file).

runtime.customers.transcript gives the facts (speaker, author, where it was written, the
agent's words and tool calls); the words are the shell's, so that the same line reads
"买家 张三" in Chinese and "buyer 张三" in English.
"""

from __future__ import annotations

from collections.abc import Callable

from runtime.customers.transcript import SEND_TOOL, TranscriptLine
from runtime.store.states import RotationReason

Gettext = Callable[[str], str]


def N_(message: str) -> str:  # gettext_noop: marked for the catalogs, translated where it is shown
    return message


_WHERE = {
    "console": N_("console"),
    "cli": N_("command line"),
    "wangwang": N_("Qianniu client"),
    "dingtalk": N_("DingTalk client"),
    "simulator": N_("simulated platform's client"),
    "platform": N_("the platform's client"),
}
_WHY = {
    RotationReason.OPERATOR: N_("an operator asked for a new session"),
    RotationReason.INACTIVITY: N_("no conversation for a long time"),
    RotationReason.MODEL_CHANGE: N_("the model changed"),
    RotationReason.PROFILE_CHANGE: N_("the agent profile changed"),
    RotationReason.DAMAGED: N_("its log was damaged"),
    RotationReason.FORK: N_("an operator forked the session"),
}


def who(line: TranscriptLine, _: Gettext) -> str:
    """Who wrote the line, as an operator reads it."""
    if line.speaker == "buyer":
        return _("buyer {name}").format(name=line.author) if line.author else _("buyer")
    if line.speaker == "assistant":
        return _("agent")
    if line.speaker == "agent-note":
        return _("agent, for operators")
    if line.speaker == "operator-dm":
        return _("operator → agent")
    where = _(_WHERE[line.via or "platform"])
    if line.author:
        return _("operator {name} ({where})").format(name=line.author, where=where)
    return _("operator ({where})").format(where=where)


def said(line: TranscriptLine, _: Gettext) -> str:
    """What the line says: a message's text; a note's words, the tools the agent called, why
    its session began, or that its log cannot be read."""
    if line.speaker != "agent-note":
        return line.text
    if line.began is not None:
        began = line.began
        why = _(_WHY[began.reason]) if began.reason in _WHY else _("for a reason not recorded")
        words = (
            N_("[new agent session {session}: forked from {parent}, {why}]")
            if began.forked
            else N_("[new agent session {session}: continues {parent}, {why}]")
        )
        return _(words).format(session=began.session_id, parent=began.parent, why=why)
    if line.unreadable is not None:
        return _("[the session log cannot be read: {error}]").format(error=line.unreadable)
    calls = [_("{tool} (no send registered)").format(tool=call) if call == SEND_TOOL else call for call in line.calls]
    called = _("[called {tools}]").format(tools=", ".join(calls)) if calls else ""
    return " ".join(part for part in (line.text, called) if part)
