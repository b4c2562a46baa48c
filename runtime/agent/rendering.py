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
    if content_type == "file":
        return f"[file {json.loads(body).get('name', '') if body.startswith('{') else body}]"
    if content_type == "voice":  # what the platform heard, so the agent can answer a voice message
        recognition = json.loads(body).get("recognition")
        return f"[voice] {recognition}" if recognition else "[voice]"
    if content_type == "video":
        return "[video]"
    platform_type = json.loads(body).get("platform_type", "unknown") if content_type == "unsupported" else content_type
    return f"[unsupported message type: {platform_type}]"


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
