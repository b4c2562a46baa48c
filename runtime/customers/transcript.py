"""A conversation as an operator reads it: what the buyer said, and what the shop sent with what
became of each send (pending, sending, sent, failed with its code, result-unknown, read by the
buyer), oldest first.

Every line carries its real time (order, paging) and the time the conversation reads
(`shown_at`): a simulated conversation's script time (runtime.agent.script_clock), so an operator sees the
same "Tuesday 9:00" for the buyer's message and the reply that the agent saw. The page says which
clock its `shown_at` times are on (`script_time`), so a view can say so once.

The shop's own messages come from the outbox, not from the platform's echoes: DingTalk never
echoes a robot's message, and an echo says nothing about a send that failed. So inbound rows
classified as our own sends (`ai`, `human-console`) are left out; their request shows instead.

A line says who wrote it as data (its speaker, author and where it was written), and a note
what the agent said and did (its words, the tools it called, why its session began): the
console and `kefu history` put them into words in the operator's language
(worker.transcript_words). The model's history has labels of its own
(runtime.agent.rendering.label), which this module never changes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, PrivateAttr

from runtime.accounts.registry import load_account
from runtime.admission.batches import load_customer
from runtime.agent.rendering import OPERATOR_DM, byte_size, content_text, media_text
from runtime.agent.script_clock import ConversationClock, conversation_clock
from runtime.agent.session_log import (
    AssistantMessage,
    CorruptSessionLog,
    SessionEvent,
    SessionLog,
    ToolResult,
    TurnStart,
    own_from,
)
from runtime.agent.sessions import customer_sessions, session_path
from runtime.errors import KefuError
from runtime.inbound.media import media_body
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection
from runtime.store.states import RotationReason, SessionOrigin
from runtime.store.tables import SessionHeader

Speaker = Literal["buyer", "native-operator", "operator-dm", "assistant", "console-operator", "agent-note"]

SEND_TOOL = "im_send_message"  # its calls show as the reply lines they registered
HANDOFF_TOOL = "im_handoff"

# A manual send's operator as `kefu send` records it: `cli:` and the login name. No console
# operator's name has a colon (runtime.operators.accounts), so the prefix alone tells them apart.
CLI_OPERATOR_PREFIX = "cli:"
# Where a shop's line was written: kefu's console or command line, or the platform's own client
# (the seller's client on it: 千牛 for Wangwang, DingTalk's app), where an operator answers
# outside kefu. `platform`: an account no longer in the store.
Via = Literal["console", "cli", "wangwang", "dingtalk", "simulator", "platform"]


class MediaLink(BaseModel):
    """A buyer's file, voice message or video whose copy is kept: the console links it (a file to
    download) or plays it (voice, video) from the store (worker.console.media)."""

    kind: Literal["file", "voice", "video"]
    sha256: str
    mime: str


class SessionBegan(BaseModel):
    """Why the agent's session a note opens continues (or forks) another."""

    session_id: str
    parent: str
    forked: bool
    reason: RotationReason | None


class TranscriptLine(BaseModel):
    key: str  # stable across reloads: the live view replaces lines by it; zero-padded, so it sorts
    at: int  # ms since epoch
    shown_at: int  # the conversation's own time of `at` (a simulation's script time; else `at`)
    speaker: Speaker
    author: str | None = None  # the buyer's or the operator's name, when known
    via: Via | None = None  # an operator's line: where it was written
    text: str  # what was said; an agent note's own words ("" when it only called tools)
    request_id: str | None = None  # the shop's messages: their outbox request
    state: str | None = None
    error_code: str | None = None
    read: bool = False
    # An agent note: the tools it called, other than the sends its reply lines show (a send call
    # listed registered nothing: refused, or never started).
    calls: list[str] = []
    began: SessionBegan | None = None  # a note opening a session that continues another
    unreadable: str | None = None  # a note for a session log that cannot be read: the error's kind
    image: str | None = None  # a buyer's image stored in the delivery store: its sha256
    media: MediaLink | None = None  # a buyer's file, voice message or video kept in the delivery store
    # Secondary: a view collapses it (still there to open). The agent's closing words after it
    # replied, and its calls of tools that changed nothing an operator must act on.
    folded: bool = False
    script_time: bool = False  # `shown_at` is on a simulation's script clock, not the shop's
    _with_calls: bool = PrivateAttr(False)  # an agent note of a reply that called tools (sorts before their sends)

    @property
    def cursor(self) -> str:
        """Where the next page further back starts (stored lines only: notes are not rows)."""
        return f"{self.at}.{self.key}"


class _Row(BaseModel):
    key: str
    at: int
    role: str  # an inbound sender role, or the request's origin
    name: str | None
    content_type: str
    body: str
    request_id: str | None
    state: str | None
    error_code: str | None
    read: bool
    operator: str | None
    occurred_at: int | None


class TranscriptPage(BaseModel):
    lines: list[TranscriptLine]
    older: str | None  # the cursor of the page further back; None at the conversation's start
    script_time: bool = False  # the lines' `shown_at` are a simulation's script time


def transcript(
    store: DeliveryStore,
    customer_id: int,
    limit: int = 200,
    sessions_dir: Path | None = None,
    before: str | None = None,
) -> TranscriptPage:
    """The conversation's newest `limit` stored lines (older than the cursor `before`), oldest
    first; with `sessions_dir`, among them in time order, the agent's own words for operators
    (its text beside the tool calls, SPEC 3.7) and the tools it called, from the customer's
    session log."""
    at, key = _parse_cursor(before) if before is not None else (None, None)
    with store.read() as conn:
        rows = (
            conn.execute(
                queries.inbound_message.TRANSCRIPT_LINES, {"c": customer_id, "n": limit + 1, "at": at, "key": key}
            )
            .mappings()
            .all()
        )
        sessions = customer_sessions(conn, customer_id)
        clock = conversation_clock(conn, customer_id)
        platform = _platform(conn, customer_id)
        parsed = [_Row.model_validate(dict(row)) for row in reversed(rows[:limit])]
        kept = _kept_copies(conn, parsed)
    script = bool(clock.anchors)
    more = len(rows) > limit
    lines = [_line(row, clock, platform, kept) for row in parsed]
    older = lines[0].cursor if more else None
    if sessions_dir is not None and sessions and lines:
        since = lines[0].at if more else 0  # the first page back in time also has what came before any line
        notes = [
            note.model_copy(update={"shown_at": clock.shown(note.at)})
            for header in sessions
            for note in agent_notes(sessions_dir, header)
            if since <= note.at and (at is None or note.at < at)
        ]
        lines = sorted(lines + notes, key=_order)
    if script:
        lines = [line.model_copy(update={"script_time": True}) for line in lines]
    return TranscriptPage(lines=lines, older=older, script_time=script)


def _kept_copies(conn: Connection, rows: list[_Row]) -> set[str]:
    """Which stored copies of the buyer's files, voice and video among the rows are still kept
    (retention prunes old ones, the messages may stay longer)."""
    named = {
        body.sha256
        for row in rows
        if row.request_id is None and row.content_type in _BUYER_MEDIA
        for body in (media_body(row.body),)
        if body.state == "stored" and body.sha256
    }
    if not named:
        return set()
    return set(conn.execute(queries.media.KEPT, {"s": json.dumps(sorted(named))}).scalars())


def _platform(conn: Connection, customer_id: int) -> str | None:
    """The customer's platform, which names the client a native operator answered from."""
    customer = load_customer(conn, customer_id)
    account = load_account(conn, customer.account_id) if customer is not None else None
    return account.platform if account is not None else None


def _parse_cursor(cursor: str) -> tuple[int, str]:
    at, _, key = cursor.partition(".")
    if not (at.isascii() and at.isdigit()) or not key:
        raise KefuError("KEFU_INVALID_INPUT", "the history cursor is not one this view printed", "copy it exactly")
    return int(at), key


def _order(line: TranscriptLine) -> tuple[int, int]:
    """Time order; within one millisecond: what came in, the agent's tool calls, what the calls
    sent, the agent's closing words."""
    if line.speaker == "agent-note":
        return line.at, 1 if line._with_calls else 3
    return line.at, 2 if line.request_id else 0


def agent_notes(sessions_dir: Path, header: SessionHeader) -> list[TranscriptLine]:
    """What the agent said to operators, and which tools it called, per model reply of one of
    the customer's sessions (a fork's own replies only), after a line saying why the session
    began when it continues another.

    A reply that only called the send tool is no note: what it sent is a line of its own, with
    its send state. A send call that registered nothing (refused, never started) stays listed:
    no reply line tells of it."""
    session_id = header.id
    notes = []
    if header.parent:
        began = SessionBegan(
            session_id=session_id,
            parent=header.parent,
            forked=header.origin == SessionOrigin.FORKED,
            reason=header.reason,
        )
        notes.append(_note(header.created_at, f"{session_id}:begin", began=began))
    log = SessionLog(session_path(sessions_dir, session_id))
    try:
        events = log.load()
    except (CorruptSessionLog, OSError) as error:
        return [*notes, _note(now_ms(), f"{session_id}:damaged", unreadable=type(error).__name__)]
    return notes + _notes_of(session_id, events[own_from(log) :])


def _notes_of(session_id: str, events: Sequence[SessionEvent]) -> list[TranscriptLine]:
    registered = {e.call_id for e in events if isinstance(e, ToolResult) and e.request_id is not None}
    notes: list[TranscriptLine] = []
    replied = False  # this turn has registered a reply to the buyer so far
    for event in events:
        if isinstance(event, TurnStart):
            replied = False
        elif isinstance(event, ToolResult) and event.name == SEND_TOOL and event.request_id is not None:
            replied = True
        elif isinstance(event, AssistantMessage):
            calls = [c["name"] for c in event.tool_calls if not (c["name"] == SEND_TOOL and c["id"] in registered)]
            if not (event.text or calls):
                continue  # it only sent: the reply lines say all of it
            note = _note(event.at, f"{session_id}:{event.seq}", event.text or "", calls)
            note.folded = _secondary(event, calls, replied)
            note._with_calls = bool(event.tool_calls)
            notes.append(note)
    return notes


def _secondary(event: AssistantMessage, calls: list[str], replied: bool) -> bool:
    """Whether an operator can skip the note: the agent's closing words after it replied in
    this turn, or calls of tools that only read or remember. Not so: words with no reply
    beside them (an answer to an operator, a reason not to reply), a handoff, a send that
    registered nothing."""
    if HANDOFF_TOOL in calls or SEND_TOOL in calls:
        return False
    if event.text:
        return replied and not event.tool_calls
    return True


def _note(
    at: int,
    key: str,
    text: str = "",
    calls: list[str] | None = None,
    began: SessionBegan | None = None,
    unreadable: str | None = None,
) -> TranscriptLine:
    return TranscriptLine(
        key=key,
        at=at,
        shown_at=at,
        speaker="agent-note",
        text=text,
        calls=calls or [],
        began=began,
        unreadable=unreadable,
    )


_INBOUND_SPEAKERS: dict[str, Speaker] = {"human-native": "native-operator", OPERATOR_DM: "operator-dm"}


def _via_of_send(operator: str | None) -> tuple[str | None, Via]:
    """Who sent one of the shop's manual requests and where: the console records its signed-in
    operator, `kefu send` `cli:` and the login name; a request with no name is an older kefu's
    command-line send (or a script's calling the runtime directly)."""
    if operator is None:
        return None, "cli"
    if operator.startswith(CLI_OPERATOR_PREFIX):
        return operator.removeprefix(CLI_OPERATOR_PREFIX) or None, "cli"
    return operator, "console"


_CLIENTS: dict[str, Via] = {"wangwang": "wangwang", "dingtalk": "dingtalk", "simulator": "simulator"}


def _line(row: _Row, clock: ConversationClock, platform: str | None, kept: set[str]) -> TranscriptLine:
    text = content_text(row.content_type, row.body)
    speaker: Speaker
    author, via = row.name, None
    if row.request_id is None:
        speaker = _INBOUND_SPEAKERS.get(row.role, "buyer")
        if speaker == "native-operator":
            via = _CLIENTS.get(platform or "", "platform")
    elif row.role == "auto":
        speaker, author = "assistant", None
    else:
        speaker = "console-operator"
        author, via = _via_of_send(row.operator)
    image, media = None, None
    if row.request_id is not None and row.content_type in ("image", "file"):
        text = f"[{row.content_type} {row.body}]"  # a sent file's row holds its name
    elif row.content_type == "image":
        text, image = _buyer_image(row.body)
    elif row.content_type in _BUYER_MEDIA:
        text, media = _buyer_media(row.content_type, row.body, kept)
    return TranscriptLine(
        key=row.key,
        at=row.at,
        shown_at=clock.shown_message(row.at, row.occurred_at, row.role),
        speaker=speaker,
        author=author,
        via=via,
        text=text,
        request_id=row.request_id,
        state=row.state,
        error_code=row.error_code,
        read=row.read,
        image=image,
        media=media,
    )


def _size(size: int) -> str:
    return f"{size} B" if size < 1024 else f"{size / 1024:.0f} KB" if size < 1024 * 1024 else f"{size / 1048576:.1f} MB"


def _buyer_image(body: str) -> tuple[str, str | None]:
    """How a buyer's image reads to an operator, and its stored copy if there is one."""
    found = media_body(body)
    if found.state == "stored" and found.sha256 is not None:
        return f"[image {found.mime}, {_size(found.size or 0)}]", found.sha256
    if found.state == "pending":
        return "[image, not fetched yet]", None
    return f"[image {found.state}: {found.code}]", None


_BUYER_MEDIA = ("file", "voice", "video")


def _buyer_media(kind: str, body: str, kept: set[str]) -> tuple[str, MediaLink | None]:
    """How a buyer's file, voice message or video reads to an operator (the model's words, and
    what became of its copy), and its copy if it is kept."""
    found = media_body(body)
    if found.state == "stored" and found.sha256 in kept and found.mime is not None:
        link = MediaLink.model_validate({"kind": kind, "sha256": found.sha256, "mime": found.mime})
        return media_text(kind, body), link
    if found.state == "stored":
        return media_text(kind, body, ("no longer kept",)), None
    if found.state == "pending":
        return media_text(kind, body, ("not fetched yet",) if found.ref else ()), None
    size = (byte_size(found.size),) if kind != "file" and found.size else ()  # a file's shows already
    return media_text(kind, body, (*size, f"{found.state}: {found.code}")), None


def transcript_version(store: DeliveryStore, customer_id: int) -> tuple[object, ...]:
    """Changes whenever the transcript, the customer's handling or their assignment does: the live view's trigger."""
    with store.read() as conn:
        row = conn.execute(queries.inbound_message.TRANSCRIPT_VERSION, {"c": customer_id}).first()
    return tuple(row) if row is not None else ()
