"""How admitted messages read to the model (SPEC 3.6): one labelled line per message, and an
operator's direct message to the agent as a plain message of its own (seed 001: a user message
without a label is the operator speaking to the agent, whose answer is for the operator)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from pydantic import BaseModel

from runtime.agent.script_clock import ConversationClock


class RenderableMessage(BaseModel):
    sender_role: str
    sender_name: str | None
    content_type: str
    body: str
    received_at: int  # ms since epoch, UTC
    occurred_at: int | None = None  # the platform's time (a simulation's script time)
    id: int | None = None  # the stored message's


def content_text(content_type: str, body: str) -> str:
    """A message as one line of text. Media bodies are kefu's JSON (runtime.inbound.ingest), except a
    file the shop sent from the console, whose mirror holds the file's name."""
    if content_type in ("text", "markdown"):
        return body
    if content_type == "image":
        return "[image]"
    if content_type in ("file", "voice", "video"):
        return media_text(content_type, body)
    platform_type = json.loads(body).get("platform_type", "unknown") if content_type == "unsupported" else content_type
    return f"[unsupported message type: {platform_type}]"


def media_text(content_type: str, body: str, notes: tuple[str, ...] = ()) -> str:
    """A buyer's file, voice message or video as text, never its bytes: `[file 报价单.pdf, 120 KB]`
    (the size once known: runtime.inbound.media fetches it), `[voice 3 s] 我要退货` (what the
    platform heard, so the agent can answer a voice message), `[video 12 s]`. `notes` (an
    operator's view: the copy's state) follow inside the brackets."""
    fields = json.loads(body) if body.startswith("{") else {"name": body}
    parts = [f"file {fields.get('name') or ''}".rstrip() if content_type == "file" else content_type]
    duration = fields.get("duration_ms")
    if content_type != "file" and isinstance(duration, int | float) and duration > 0:
        parts[0] += f" {max(1, round(duration / 1000))} s"
    size = fields.get("size")
    if content_type == "file" and isinstance(size, int) and size > 0:
        parts.append(byte_size(size))
    text = f"[{', '.join((*parts, *notes))}]"
    recognition = fields.get("recognition") if content_type == "voice" else None
    return f"{text} {recognition}" if recognition else text


def byte_size(size: int) -> str:
    """A size as people read it: 512 B, 120 KB, 3.4 MB."""
    if size < 1024:
        return f"{size} B"
    return f"{size / 1024:.0f} KB" if size < 1024 * 1024 else f"{size / 1048576:.1f} MB"


OPERATOR_DM = "operator-dm"


def label(sender_role: str, sender_name: str | None) -> str:
    # Never "[label]: text": Markdown would read that as a link reference definition.
    if sender_role == OPERATOR_DM:  # shown to operators only: the model gets no label for it
        return "[operator to the agent]"
    if sender_role == "human-console":
        return "[operator from console]"
    if sender_role == "human-native":
        return "[operator from native client]"
    if sender_role == "ai":
        return "[assistant reply]"  # the platform's echo of our own automatic reply
    return f"[counterpart {sender_name}]" if sender_name else "[counterpart]"


def shown(message: RenderableMessage, clock: ConversationClock) -> RenderableMessage:
    """The message with its time as the conversation reads it (runtime.agent.script_clock)."""
    at = clock.shown_message(message.received_at, message.occurred_at, message.sender_role)
    return message.model_copy(update={"received_at": at})


UNKNOWN_TIME = "????-??-?? ??:??"


def zone_label(zone: ZoneInfo) -> str:
    """The shop's zone as people read it, e.g. "Asia/Shanghai (UTC+08:00)": said once beside
    times shown in it, so nobody wonders which clock a time is on."""
    offset = datetime.now(tz=zone).strftime("%z")
    return f"{zone.key} (UTC{offset[:3]}:{offset[3:]})"


def shop_time(received_at_ms: int, zone: ZoneInfo) -> str:
    """The time in the shop's zone. A stored time no calendar holds there (one an older kefu let
    in, near year 1 or 9999, or beyond) is shown as unknown: raising here would fail every run of
    the turn and leave its batch claimed for ever."""
    try:
        return datetime.fromtimestamp(received_at_ms / 1000, tz=UTC).astimezone(zone).strftime("%Y-%m-%d %H:%M")
    except (OverflowError, ValueError, OSError):
        return UNKNOWN_TIME


def render_line(message: RenderableMessage, zone: ZoneInfo) -> str:
    when = shop_time(message.received_at, zone)
    return (
        f"[{when}] {label(message.sender_role, message.sender_name)} {content_text(message.content_type, message.body)}"
    )


def render_batch(messages: list[RenderableMessage], zone: ZoneInfo) -> str:
    return "\n".join(render_line(message, zone) for message in messages)


def render_inputs(messages: list[RenderableMessage], zone: ZoneInfo) -> list[str]:
    """A batch as the user messages of its turn: each run of IM lines as one labelled message,
    each operator's direct message as its own, unlabelled, so no IM line can pass for one."""
    return [text for text, _ in input_parts(messages, zone)]


def input_parts(messages: list[RenderableMessage], zone: ZoneInfo) -> list[tuple[str, list[RenderableMessage]]]:
    """`render_inputs`, each user message with the lines it renders."""
    parts: list[tuple[str, list[RenderableMessage]]] = []
    run: list[RenderableMessage] = []
    for message in messages:
        if message.sender_role != OPERATOR_DM:
            run.append(message)
            continue
        if run:
            parts.append((render_batch(run, zone), run))
            run = []
        parts.append((message.body, [message]))
    if run:
        parts.append((render_batch(run, zone), run))
    return parts
