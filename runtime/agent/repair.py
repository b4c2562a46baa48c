"""Closing a turn a session log left open (seed 002 5.10): after a crash, before a fork's copy
ends, never by running a tool again.

An open turn at a log's tail is either waiting for the next attempt of a model call (a run
ended there on purpose: `waiting_for_model`) or was cut off. A cut-off turn is closed by
closers appended after the tail: a result for every tool call without one (TOOL_NOT_STARTED
when it never started, TOOL_OUTCOME_UNKNOWN when it did: the outside state must be queried
before any retry), the open step's end, and `turn/end` (interrupted, or forked for a fork's
copy). Closers carry the time of the last event, not of the repair, so closing the same log
twice (two processes after a crash, a test) writes the very same events.

A started call whose effect kefu itself recorded (a reply registered in the outbox before the
crash: `Recorded`) is closed with that record, as the tool would have answered, not as
unknown: told "outcome unknown", a model sends the reply again in other words, and the buyer
reads it twice. A worker running hundreds of turns on threads cuts many turns at once, some
of them between registering a reply and logging its result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import UnionType
from typing import Any, Literal

from runtime.agent.session_log import (
    AssistantAttempt,
    AssistantMessage,
    EventType,
    SessionEvent,
    SessionLog,
    StepEnd,
    StepStart,
    ToolCallStart,
    ToolResult,
    TurnEnd,
    TurnStart,
)

Closer = tuple[EventType, dict[str, Any]]
# (turn id, call id, tool name) -> the result the tool gave as kefu recorded it elsewhere, and
# its request id; None when kefu's records say nothing of that call.
Recorded = Callable[[str, str, str], tuple[str, str] | None]


@dataclass(frozen=True)
class Waiting:
    """The open turn at the tail of a log waits for the next attempt of its model call: its last
    step started, and since then only failed attempts (after the step's own read notices and
    memory events) were logged. The run that failed ended there instead of sleeping; the next
    run goes on with that step, so the model sees the same view it would have."""

    turn_id: str
    batch_id: str
    step: int
    attempts: int
    last_attempt_at: int
    retry_after_s: float | None  # the provider's word on when to try again, with the last attempt


def waiting_for_model(log: SessionLog) -> Waiting | None:
    events = log.events
    if not events or not isinstance(events[-1], AssistantAttempt):
        return None
    turn_at, step_at = last_of(events, TurnStart | TurnEnd), last_of(events, StepStart | StepEnd)
    if turn_at is None or step_at is None or step_at < turn_at:
        return None
    turn, step = events[turn_at], events[step_at]
    if not isinstance(turn, TurnStart) or not isinstance(step, StepStart):
        return None
    after = events[step_at + 1 :]
    if any(isinstance(e, AssistantMessage | ToolCallStart | ToolResult) for e in after):
        return None
    attempts = sum(isinstance(e, AssistantAttempt) for e in after)
    last = events[-1]
    return Waiting(turn.turn, turn.batch_id, step.step, attempts, last.at, last.retry_after_s)


def last_of(events: list[SessionEvent], kinds: type | UnionType) -> int | None:
    """The index of the last event of these kinds, searched from the tail (logs grow long)."""
    return next((i for i in range(len(events) - 1, -1, -1) if isinstance(events[i], kinds)), None)


def repair(log: SessionLog, recorded: Recorded | None = None) -> bool:
    """Close an unfinished turn at the tail, unless it only waits for a model retry. Returns
    True if closers were appended."""
    if waiting_for_model(log) is not None:
        return False
    return close_unfinished(log, recorded)


def close_unfinished(log: SessionLog, recorded: Recorded | None = None) -> bool:
    """Close the open turn at the tail as interrupted; True if there was one."""
    closers = open_turn_closers(log.events, "interrupted", recorded)
    for type, data in closers:
        log.append(type, **data)
    log.flush()
    return bool(closers)


_NOTES = {
    ("interrupted", "TOOL_OUTCOME_UNKNOWN"): "outcome unknown: query outside state before any retry",
    ("interrupted", "TOOL_NOT_STARTED"): "never started",
    ("forked", "TOOL_OUTCOME_UNKNOWN"): "outcome unknown in this fork: query outside state before any retry",
    ("forked", "TOOL_NOT_STARTED"): "not started before the fork (the parent session may have run it later)",
}


def open_turn_closers(
    events: list[SessionEvent], outcome: Literal["interrupted", "forked"], recorded: Recorded | None = None
) -> list[Closer]:
    """The events (type and fields, `at` included) that close the open turn at the end of
    `events`: none if the last turn ended."""
    start = last_of(events, TurnStart | TurnEnd)
    if start is None:
        return []
    turn = events[start]
    if not isinstance(turn, TurnStart):
        return []
    tail = events[start:]
    at = events[-1].at
    requested = [c for e in tail if isinstance(e, AssistantMessage) for c in e.tool_calls]
    started = {e.call_id for e in tail if isinstance(e, ToolCallStart)}
    finished = {e.call_id for e in tail if isinstance(e, ToolResult)}
    closers: list[Closer] = []
    for call in requested:
        if call["id"] in finished:
            continue
        known = recorded(turn.turn, call["id"], call["name"]) if recorded and call["id"] in started else None
        if known is not None:
            content, request_id = known
            result = {"at": at, "call_id": call["id"], "name": call["name"], "content": content}
            closers.append(("tool/result", {**result, "request_id": request_id}))
            continue
        code = "TOOL_OUTCOME_UNKNOWN" if call["id"] in started else "TOOL_NOT_STARTED"
        closers.append(
            (
                "tool/result",
                {
                    "at": at,
                    "call_id": call["id"],
                    "name": call["name"],
                    "is_error": True,
                    "code": code,
                    "content": f"Error: {code}: {_NOTES[outcome, code]}",
                },
            )
        )
    step = next((e for e in reversed(tail) if isinstance(e, StepStart | StepEnd)), None)
    if isinstance(step, StepStart):
        closers.append(("step/end", {"at": at, "turn": step.turn, "step": step.step}))
    closers.append(("turn/end", {"at": at, "turn": turn.turn, "outcome": outcome}))
    return closers
