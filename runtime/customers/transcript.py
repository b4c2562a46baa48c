"""A conversation as an operator reads it: what the buyer said, and what the shop sent with what
became of each send (pending, sending, sent, failed with its code, result-unknown, read by the
buyer), oldest first.

Every line carries its real time (order, paging) and the time the conversation reads
(`shown_at`): a simulated conversation's script time (runtime.agent.script_clock), so an operator sees the
same "Tuesday 9:00" for the buyer's message and the reply that the agent saw.

The shop's own messages come from the outbox, not from the platform's echoes: DingTalk never
echoes a robot's message, and an echo says nothing about a send that failed. So inbound rows
classified as our own sends (`ai`, `human-console`) are left out; their request shows instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from runtime.agent.rendering import OPERATOR_DM, content_text, label
from runtime.agent.script_clock import ConversationClock, conversation_clock
from runtime.agent.session_log import AssistantMessage, CorruptSessionLog, SessionLog, own_from
from runtime.agent.sessions import customer_sessions, session_path
from runtime.errors import KefuError
from runtime.inbound.media import image_body
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.states import SessionOrigin
from runtime.store.tables import SessionHeader

Speaker = Literal["buyer", "native-operator", "operator-dm", "assistant", "console-operator", "agent-note"]


class TranscriptLine(BaseModel):
    key: str  # stable across reloads: the live view replaces lines by it; zero-padded, so it sorts
    at: int  # ms since epoch
    shown_at: int  # the conversation's own time of `at` (a simulation's script time; else `at`)
    speaker: Speaker
    label: str  # as the agent's history shows it, with the console operator's name
    text: str
    request_id: str | None = None  # the shop's messages: their outbox request
    state: str | None = None
    error_code: str | None = None
    read: bool = False
    calls: list[str] = []  # an agent note: the tools it called
    image: str | None = None  # a buyer's image stored in the delivery store: its sha256

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
    more = len(rows) > limit
    lines = [_line(_Row.model_validate(dict(row)), clock) for row in reversed(rows[:limit])]
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
    return TranscriptPage(lines=lines, older=older)


def _parse_cursor(cursor: str) -> tuple[int, str]:
    at, _, key = cursor.partition(".")
    if not (at.isascii() and at.isdigit()) or not key:
        raise KefuError("KEFU_INVALID_INPUT", "the history cursor is not one this view printed", "copy it exactly")
    return int(at), key


def _order(line: TranscriptLine) -> tuple[int, int]:
    """Time order; within one millisecond: what came in, the agent's tool calls, what the calls
    sent, the agent's closing words."""
    if line.speaker == "agent-note":
        return line.at, 1 if line.calls else 3
    return line.at, 2 if line.request_id else 0


def agent_notes(sessions_dir: Path, header: SessionHeader) -> list[TranscriptLine]:
    """What the agent said to operators, and which tools it called, per model reply of one of
    the customer's sessions (a fork's own replies only), after a line saying why the session
    began when it continues another."""
    session_id = header.id
    notes = [_note(header.created_at, f"{session_id}:begin", _began(header))] if header.parent else []
    log = SessionLog(session_path(sessions_dir, session_id))
    try:
        events = log.load()
    except (CorruptSessionLog, OSError) as error:
        return [
            *notes,
            _note(now_ms(), f"{session_id}:damaged", f"[the session log cannot be read: {type(error).__name__}]"),
        ]
    for event in events[own_from(log) :]:
        if isinstance(event, AssistantMessage) and (event.text or event.tool_calls):
            calls = [call["name"] for call in event.tool_calls]
            text = " ".join(part for part in (event.text, f"[called {', '.join(calls)}]" if calls else "") if part)
            notes.append(_note(event.at, f"{session_id}:{event.seq}", text, calls))
    return notes


def _began(header: SessionHeader) -> str:
    how = "forked from" if header.origin == SessionOrigin.FORKED else "continues"
    return f"[new agent session {header.id}: {how} {header.parent}, {header.reason or 'unknown reason'}]"


def _note(at: int, key: str, text: str, calls: list[str] | None = None) -> TranscriptLine:
    label = "[agent, for operators]"
    return TranscriptLine(key=key, at=at, shown_at=at, speaker="agent-note", label=label, text=text, calls=calls or [])


_INBOUND_SPEAKERS: dict[str, Speaker] = {"human-native": "native-operator", OPERATOR_DM: "operator-dm"}


def _line(row: _Row, clock: ConversationClock) -> TranscriptLine:
    text = content_text(row.content_type, row.body)
    speaker: Speaker
    if row.request_id is None:
        speaker = _INBOUND_SPEAKERS.get(row.role, "buyer")
        shown = label(row.role, row.name)
    elif row.role == "auto":
        speaker, shown = "assistant", label("ai", None)
    else:
        speaker = "console-operator"
        shown = f"[operator {row.operator} from console]" if row.operator else label("human-console", None)
    image = None
    if row.request_id is not None and row.content_type in ("image", "file"):
        text = f"[{row.content_type} {row.body}]"  # a sent file's row holds its name
    elif row.content_type == "image":
        text, image = _buyer_image(row.body)
    return TranscriptLine(
        key=row.key,
        at=row.at,
        shown_at=clock.shown_message(row.at, row.occurred_at, row.role),
        speaker=speaker,
        label=shown,
        text=text,
        request_id=row.request_id,
        state=row.state,
        error_code=row.error_code,
        read=row.read,
        image=image,
    )


def _size(size: int) -> str:
    return f"{size} B" if size < 1024 else f"{size / 1024:.0f} KB" if size < 1024 * 1024 else f"{size / 1048576:.1f} MB"


def _buyer_image(body: str) -> tuple[str, str | None]:
    """How a buyer's image reads to an operator, and its stored copy if there is one."""
    found = image_body(body)
    if found.state == "stored" and found.sha256 is not None:
        return f"[image {found.mime}, {_size(found.size or 0)}]", found.sha256
    if found.state == "pending":
        return "[image, not fetched yet]", None
    return f"[image {found.state}: {found.code}]", None


def transcript_version(store: DeliveryStore, customer_id: int) -> tuple[object, ...]:
    """Changes whenever the transcript or the customer's handling does: the live view's trigger."""
    with store.read() as conn:
        row = conn.execute(queries.inbound_message.TRANSCRIPT_VERSION, {"c": customer_id}).first()
    return tuple(row) if row is not None else ()
