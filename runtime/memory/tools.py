"""The memory tools (SPEC 5): `memory_recall`, `memory_judge`, `memory_image`. They act on the
bound customer's scope only; bad arguments come back as model-readable errors.

`memory_recall` is a lookup, not a recall decision: it never advances the lanes or writes the
recall state, so every page is stable (the same arguments give the same page, pages never
overlap) and the automatic recall's fairness is untouched by the model's searches.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field

from runtime.agent.tools import Args, Tool, ToolOutcome, Tools, TurnBinding, parse_arguments
from runtime.memory.engine import SessionMemory, render_memory
from runtime.memory.judge import EVENT_SIMILAR, JudgeCallInvalid, dice, judge, normalize_event, similar_event
from runtime.memory.recall import RecallIndex
from runtime.memory.store import IndexedFolder
from runtime.memory.time_window import Window, overlaps, time_query
from runtime.ports import ToolCall, ToolSpec
from runtime.store import now_ms

RECALL_TEXT_MAX = 2000  # characters of one folder's text in a result
# Searches in a row whose keywords match nothing (source §1.3.2): a hint at the 3rd, and the
# tool is off for the rest of the turn at the 6th. A time or event filter that emptied the
# result is no such miss (the words matched; the model is told to widen or ask).
MISS_HINT_AT, MISS_STOP_AT = 3, 6
MissType = Literal["keyword", "time", "event", "other"]


TIME_FORMS = "YYYY-MM-DD, YYYY-MM, YYYY, epoch ms, or as the customer said it: 昨天, 上周五, 4月27号, 2024年5月"


class MemoryRecallArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    keywords: str | None = Field(None, max_length=500, description="names, order numbers, products; space separated")
    limit: int = Field(3, ge=1, le=20)
    offset: int = Field(0, ge=0, le=10_000)
    time_from: str | None = Field(None, alias="timeFrom", max_length=100, description=TIME_FORMS)
    time_to: str | None = Field(None, alias="timeTo", max_length=100, description=TIME_FORMS)
    granularity: Literal["day", "month", "year"] | None = None
    event: str | None = Field(None, max_length=200, description="an event label; 空 or omitted: no constraint")


MEMORY_RECALL = ToolSpec(
    name="memory_recall",
    description="Search this customer's archived conversation (long-term memory) by keywords, time and event. "
    "Use it when the context lacks earlier details (orders, addresses, promises). Results come in pages: pass "
    "the offset the result names for more. A time window widens day → ±1 day → month → year when nothing "
    "matches; a range with both ends is exact.",
    parameters=MemoryRecallArgs.model_json_schema(by_alias=True),
)


class EventMatch(BaseModel):
    state: Literal["none", "exact", "ambiguous", "unknown"]
    label: str | None = None
    candidates: list[str] = []


def match_event(raw: str | None, labels: list[str]) -> EventMatch:
    """exact: a known label (or the one label at least 0.72 similar); ambiguous: several
    similar labels, never merged at recall time; unknown: no label is close."""
    label = normalize_event(raw) if raw is not None else None
    if label is None:
        return EventMatch(state="none")
    if label in labels:
        return EventMatch(state="exact", label=label)
    similar = sorted((other for other in labels if dice(label, other) >= EVENT_SIMILAR), key=lambda o: -dice(label, o))
    if len(similar) == 1:
        return EventMatch(state="exact", label=similar_event(label, labels))
    if similar:
        return EventMatch(state="ambiguous", label=label, candidates=similar)
    return EventMatch(state="unknown", label=label)


def _describe(memory: SessionMemory, folder: IndexedFolder) -> str:
    text = memory.store.text(folder.id)
    cut = text[:RECALL_TEXT_MAX] + ("…(truncated)" if len(text) > RECALL_TEXT_MAX else "")
    event = f' event="{folder.event}"' if folder.event else ""
    return render_memory(folder, cut, memory.zone, f" alpha={folder.alpha}{event}")


def _within_time(
    candidates: list[str], windows: list[Window], index: RecallIndex, zone: ZoneInfo, notes: list[str]
) -> list[str]:
    """The candidates inside the first window of the ladder that holds any (a hard window holds
    the answer even when empty); the window applied goes into `notes`."""
    for window in windows:
        folders = index.folders
        inside = [i for i in candidates if overlaps(window, folders[i].event_from, folders[i].event_to)]
        if inside or window.hard:
            start = datetime.fromtimestamp(window.start_ms / 1000, zone)
            end = datetime.fromtimestamp((window.end_ms - 1) / 1000, zone)
            notes.append(f"time window ({window.level}) {start:%Y-%m-%d} to {end:%Y-%m-%d}")
            return inside
    if windows:
        notes.append("no memory in any time window up to the year: searched all time")
    return candidates


def memory_recall(memory: SessionMemory, args: MemoryRecallArgs) -> ToolOutcome:
    return lookup(memory, args)[0]


def lookup(memory: SessionMemory, args: MemoryRecallArgs) -> tuple[ToolOutcome, MissType | None]:
    """The search, and what kind of miss it was when it found nothing (None: it found some;
    "other": no search was made, or a page past the end)."""
    now = memory.clock.shown(now_ms())
    times = time_query(args.time_from, args.time_to, memory.zone, now, args.granularity)
    notes = list(times.warnings)
    event = match_event(args.event, memory.store.events(memory.scope))
    if event.state == "ambiguous":
        listed = "、".join(f"「{c}」" for c in event.candidates)
        return ToolOutcome(
            f"Event 「{event.label}」 is ambiguous: it may be {listed}. Retry with one of them, "
            "or ask the customer which one they mean."
        ), "other"
    if event.state == "unknown":
        return ToolOutcome(
            f"No memory carries an event like 「{event.label}」. Retry without `event` (or 空), "
            "with keywords or a time range, or ask the customer for the event's name."
        ), "other"
    keywords = (args.keywords or "").strip()
    if not keywords and not times.windows and event.state != "exact":
        return ToolOutcome("Error: give keywords, a time (timeFrom/timeTo) or an event", True), "other"
    index = RecallIndex.of(memory.store, memory.scope, memory.settings.recall.min_alpha)
    today = datetime.fromtimestamp(now / 1000, memory.zone).date()  # what 昨天 in the keywords means
    candidates = index.ranked(keywords, today) if keywords else sorted(index.folders, key=index.sigmas.__getitem__)
    miss: MissType | None = "keyword" if keywords and not candidates else None
    if event.state == "exact":
        matched, candidates = candidates, [i for i in candidates if index.folders[i].event == event.label]
        notes.append(f"event constrained to 「{event.label}」")
        miss = miss or ("event" if matched and not candidates else None)
    matched, candidates = candidates, _within_time(candidates, times.windows, index, memory.zone, notes)
    miss = miss or ("time" if keywords and matched and not candidates else None)
    page = candidates[args.offset : args.offset + args.limit]
    head = "; ".join(notes)
    if not page:
        found = "No archived memory matches" + (" on this page" if args.offset else "")
        return ToolOutcome(f"{found}." + (f" ({head})" if head else "")), "other" if args.offset else miss or "other"
    body = "\n".join(_describe(memory, index.folders[i]) for i in page)
    rest = len(candidates) - args.offset - len(page)
    more = f"\n({rest} more: offset={args.offset + len(page)})" if rest > 0 else "\n(no more results)"
    return ToolOutcome((f"({head})\n" if head else "") + body + more), None


class MemoryJudgeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    updates: list[dict[str, Any]] = Field(
        description="[{id, alpha 0.01-1, beta -10..10, keywords (3-8), event?, keep?, reason?}]"
    )


MEMORY_JUDGE = ToolSpec(
    name="memory_judge",
    description="Score archived memories: alpha (0.01-1) is how much the memory matters for future conversations "
    "(the customer's preferences, agreements, decisions, orders and addresses high; small talk low) and decides "
    "recall priority; beta (-10..10) is whether it can be used as fact (jokes, retracted or suspicious content "
    "negative; reliable facts and agreements positive; unsure about 0). A new memory needs alpha, beta and 3-8 "
    "keywords together; keep=true leaves a memory as it is. event names the event it belongs to (空 for none).",
    parameters=MemoryJudgeArgs.model_json_schema(),
)


def memory_judge(memory: SessionMemory, args: MemoryJudgeArgs) -> ToolOutcome:
    try:
        result = judge(memory.store, memory.scope, {"updates": args.updates})
    except JudgeCallInvalid as error:
        return ToolOutcome(f"Error: {error.message} ({error.code}); {error.action}", True)
    memory.store.record(
        memory.scope, "judge", updated=len(result.updated), kept=len(result.kept), rejected=len(result.rejected)
    )
    return ToolOutcome(
        json.dumps(result.model_dump(), ensure_ascii=False), is_error=not result.updated and bool(result.rejected)
    )


class MemoryImageArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    query: str | None = Field(None, max_length=200)
    memory_id: str | None = Field(None, alias="memoryId", max_length=256)
    name: str | None = Field(None, max_length=200)
    limit: int = Field(10, ge=1, le=20)


MEMORY_IMAGE = ToolSpec(
    name="memory_image",
    description="Find images archived with this customer's memories by keyword, memory id or file name; returns "
    "each image's file path, whether it still exists, its type and size. Read-only.",
    parameters=MemoryImageArgs.model_json_schema(by_alias=True),
)


def memory_image(memory: SessionMemory, args: MemoryImageArgs) -> ToolOutcome:
    images = memory.store.images(memory.scope)
    folders = {f.id: f for f in memory.store.folders(memory.scope)}
    query = (args.query or "").lower()

    def matches(image) -> bool:  # type: ignore[no-untyped-def]
        folder = folders.get(image.folder_id)
        words = [image.name.lower(), *(folder.keywords if folder else []), (folder.title if folder else "").lower()]
        return (
            (not args.memory_id or image.folder_id == args.memory_id)
            and (not args.name or args.name.lower() in image.name.lower())
            and (not query or any(query in w or w and w in query for w in words))
        )

    found = [image for image in reversed(images) if matches(image)][: args.limit]
    if not found:
        return ToolOutcome("No archived image matches.")
    lines = [
        f"{image.path} · exists={image.exists} · {image.mime} · {image.size} bytes · memory {image.folder_id}"
        for image in found
    ]
    return ToolOutcome("\n".join(lines))


def _bound(model: type[Args], run: Callable[[SessionMemory, Args], ToolOutcome]) -> Tool:
    """A memory tool as the turn calls it: the bound customer's memory and checked arguments."""

    def tool(binding: TurnBinding, call: ToolCall) -> ToolOutcome:
        if binding.memory is None:
            return ToolOutcome("Error: the memory engine is off (KEFU_MEMORY__ENABLED=false)", True)
        args = parse_arguments(call, model)
        return args if isinstance(args, ToolOutcome) else run(binding.memory, args)

    return tool


def _recall(binding: TurnBinding, call: ToolCall) -> ToolOutcome:
    """`memory_recall` as the turn calls it, counting the turn's keyword misses in a row."""
    if binding.memory is None:
        return ToolOutcome("Error: the memory engine is off (KEFU_MEMORY__ENABLED=false)", True)
    if binding.recall_misses >= MISS_STOP_AT:
        return ToolOutcome(_STOPPED, True)
    args = parse_arguments(call, MemoryRecallArgs)
    if isinstance(args, ToolOutcome):
        return args
    outcome, miss = lookup(binding.memory, args)
    if miss == "other":  # no search made: neither a strike nor a match
        return outcome
    if miss is not None and miss != "keyword":  # the words matched: no strike
        return ToolOutcome(f"{outcome.content} {_WIDEN[miss]}")
    binding.recall_misses = binding.recall_misses + 1 if miss == "keyword" else 0
    if binding.recall_misses >= MISS_STOP_AT:
        return ToolOutcome(f"{outcome.content} {_STOPPED}", True)
    if binding.recall_misses == MISS_HINT_AT:
        return ToolOutcome(
            f"{outcome.content} That is {MISS_HINT_AT} searches in a row without a match: try other words, a time "
            "range (timeFrom/timeTo) or an event, or ask the customer what they mean."
        )
    return outcome


_WIDEN = {
    "time": "The words matched outside that time: widen the range, or ask the customer when it was.",
    "event": "The words matched, but not in that event: retry without it, or ask the customer.",
}
_STOPPED = (
    f"Error: memory_recall matched nothing {MISS_STOP_AT} times in a row; it is off until the customer's next "
    "message. Answer with what you know, or ask the customer."
)


MEMORY_TOOLS: Tools = {
    MEMORY_RECALL.name: (MEMORY_RECALL, _recall),
    MEMORY_JUDGE.name: (MEMORY_JUDGE, _bound(MemoryJudgeArgs, memory_judge)),
    MEMORY_IMAGE.name: (MEMORY_IMAGE, _bound(MemoryImageArgs, memory_image)),
}
