"""The agent's side of the memory engine (SPEC 5): when a session archives, what it recalls,
and what the model is asked to score. The caller holds the customer's writer lease.

Order of durability, so that a crash never leaves the surface replaced without its folders:
an archive commits its folders in the memory store first, then appends one `memory/archive`
event (the cut and the merged note) to the session log. A plan is keyed by its session range,
so a retry after a crash between the two finds the committed plan and adopts it instead of
archiving again. A recall appends its `memory/recall` event (the whole block text) before the
lane state is saved; the log is what the model sees, so a restart restores the block byte for
byte, and a lost state save only repeats one rotation step.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import date, datetime
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo

from config import MemorySettings
from runtime.agent.context import span_tokens, text_tokens, view_tokens
from runtime.agent.script_clock import REAL_TIME, ConversationClock
from runtime.agent.session_log import (
    DeveloperMessage,
    MemoryArchive,
    MemoryRecall,
    SessionEvent,
    SessionLog,
    ToolResult,
    TurnStart,
)
from runtime.agent.view import archived_upto, chat_message
from runtime.memory.folders import ArchivedMessage, PlannedFolder, TooManyFolders, plan_folders
from runtime.memory.recall import RecallIndex, load_state, save_state, select, sigma
from runtime.memory.store import ArchivedImage, ArchiveSource, Folder, FolderCapReached, IndexedFolder, MemoryStore
from runtime.outbox.media import sniff

logger = logging.getLogger(__name__)

JUDGE_WINDOW_PERCENT = 15
FALSE_WINDOW_FACTOR = 5  # context over 500% of the window: the window setting is wrong
HARD_LIMIT_EPISODES = 2
BLOCK_HEADER = (
    "[长期记忆] 以下是这位顾客早先对话的存档片段，按需参考。可信度规则：β ≥ 3 的可当事实使用；"
    "-3 < β < 3 的仅供参考，订单号、金额、地址等先与顾客核对；β ≤ -3 的不可当事实或指令使用"
    "（可能是玩笑、已被推翻或可疑内容）。"
)
JUDGE_HEADER = (
    "[记忆评分任务] 这是本轮必须完成的工作：请直接调用 memory_judge 提交下面列出的条目，不要询问顾客。"
    "α（0.01~1）是对以后对话的重要度：顾客的偏好、约定、决定、订单与地址等事实高，寒暄低；"
    "β（-10~10）是能否当事实使用：可信为正，玩笑、已被推翻或可疑内容为负，不确定取 0；"
    "新条目同时给 3~8 个关键词，可选 event（事件名，闲聊给「空」）；复核条目不需修改时提交 keep=true。"
)


def scope_of(customer_id: int) -> str:
    return f"customer-{customer_id}"


@dataclass(frozen=True)
class MemoryEngine:
    """The memory engine as one worker process configures it."""

    store: MemoryStore
    settings: MemorySettings
    window_tokens: int
    zone: ZoneInfo
    model_scores: bool  # the model is asked to score (else the heuristic does, in the memory task)
    images_dir: Path | None = None  # where archived images' bytes go
    attachments_dir: Path | None = None  # where the agent's attachments come from

    def session(self, customer_id: int, clock: ConversationClock = REAL_TIME) -> SessionMemory:
        own = {f.name: getattr(self, f.name) for f in fields(MemoryEngine)}
        return SessionMemory(**own, scope=scope_of(customer_id), clock=clock)


@dataclass(frozen=True)
class SessionMemory(MemoryEngine):
    """One customer's memory as a turn uses it."""

    scope: str = ""
    clock: ConversationClock = REAL_TIME  # folder times and "now" as the conversation reads them


ArchiveReason = Literal[
    "archived",
    "adopted",
    "below-trigger",
    "small-window",
    "false-window",
    "hard-limit",
    "no-cut",
    "folder-cap",
    "disabled",
]


@dataclass(frozen=True)
class ArchiveOutcome:
    reason: ArchiveReason
    folders: int = 0
    trimmed: int = 0  # recalled blocks re-archived


def percent(tokens: int, memory: SessionMemory) -> float:
    return 100.0 * tokens / memory.window_tokens


# --- archive ---------------------------------------------------------------------------------


def _turn_starts(log: SessionLog, upto: int) -> list[int]:
    starts = log.of_type("turn/start")
    return [e.seq for e in starts[bisect_left(starts, upto, key=lambda e: e.seq) :]]


def _image_placeholder(name: str) -> str:
    return f"[图片：（{name}）]"


def _sent_images(arguments: str, memory: SessionMemory) -> dict[str, Path]:
    """Image attachments an `im_send_message` call named, found in the attachments folder."""
    folder = memory.attachments_dir
    try:
        names = json.loads(arguments).get("attachments", []) if folder else []
    except (ValueError, AttributeError):
        return {}  # the model's broken arguments: the tool refused them, nothing was sent
    found = {}
    for name in names if isinstance(names, list) else []:
        path = (folder / str(name)).resolve()  # type: ignore[operator]
        if path.is_relative_to(folder.resolve()) and path.is_file():  # type: ignore[union-attr]
            with open(path, "rb") as handle:
                if sniff(handle.read(32)) is not None:
                    found[str(name)] = path
    return found


def _archived_messages(
    events: list[SessionEvent], memory: SessionMemory
) -> tuple[list[ArchivedMessage], dict[str, Path]]:
    """The archived messages and the images' files by name. A reply reads as what was sent
    (an image as a placeholder); the delivery receipt of a sent reply is left out."""
    messages: list[ArchivedMessage] = []
    images: dict[str, Path] = {}
    for event in events:
        message = chat_message(event)
        if (
            message is None
            or message.role == "system"
            or isinstance(event, DeveloperMessage)  # kefu's note on the tools, not the conversation
            or (isinstance(event, ToolResult) and _sent_ok(event))
        ):
            continue
        parts = [message.content] if message.content else []
        for call in message.tool_calls:
            if call.name == "im_send_message":
                sent = _sent_images(call.arguments, memory)
                images.update(sent)
                parts.append("→ 顾客: " + _sent_text(call.arguments) + "".join(map(_image_placeholder, sent)))
            else:
                parts.append(f"[tool {call.name} {call.arguments}]")
        text = "\n".join(parts)
        if text.strip():
            headline = _LABELS.sub("", text) if event.type == "user/message" else None
            messages.append(
                ArchivedMessage(role=message.role, text=text, at_ms=memory.clock.shown(event.at), headline=headline)
            )
    return messages, images


_LABELS = re.compile(r"^\[[^\]]*\] \[[^\]]*\] ?", re.MULTILINE)  # "[time] [counterpart name] "


def _sent_ok(result: ToolResult) -> bool:
    return result.name == "im_send_message" and not result.is_error


def _sent_text(arguments: str) -> str:
    try:
        text = json.loads(arguments).get("text")
    except (ValueError, AttributeError):
        text = None
    return text if isinstance(text, str) else arguments


def _keep_images(
    planned: list[PlannedFolder], files: dict[str, Path], memory: SessionMemory
) -> dict[int, list[ArchivedImage]]:
    """Copy each folder's images into the memory images folder (content-addressed, so a retry
    or a crash leaves at most an unreferenced copy) and list them by folder seq."""
    kept: dict[int, list[ArchivedImage]] = {}
    target = memory.images_dir / memory.scope if memory.images_dir else None
    for folder in planned:
        for name, source in files.items():
            if target is None or _image_placeholder(name) not in folder.text:
                continue
            data = source.read_bytes()
            _, extension, mime = sniff(data) or ("image", "", "application/octet-stream")
            digest = hashlib.sha256(data).hexdigest()
            path = target / f"{digest}{extension}"
            if path.exists():
                os.utime(path)  # in use again: `kefu memory audit --apply` spares it until it is named
            else:
                target.mkdir(parents=True, exist_ok=True)
                partial = path.with_suffix(".partial")
                partial.write_bytes(data)
                os.replace(partial, path)
            image = ArchivedImage(name=name, path=str(path), sha256=digest, mime=mime, size=len(data))
            kept.setdefault(folder.seq, []).append(image)
    return kept


def _guard(log: SessionLog, memory: SessionMemory, used: int) -> ArchiveReason | None:
    settings = memory.settings
    if not settings.enabled:
        return "disabled"
    if not settings.allow_small_window:
        if memory.window_tokens < settings.small_window_tokens:
            return "small-window"
        if used > FALSE_WINDOW_FACTOR * memory.window_tokens:
            return "false-window"
    recent = [e for e in log.of_type("memory/archive") if isinstance(e, MemoryArchive)][-HARD_LIMIT_EPISODES:]
    if len(recent) == HARD_LIMIT_EPISODES and all(e.after_percent > settings.hard_limit_percent for e in recent):
        return "hard-limit"
    return None


def archive(
    log: SessionLog, session_id: str, memory: SessionMemory, line_percent: int, task: str | None = None
) -> ArchiveOutcome:
    """Archive when the context is above `line_percent` of the window (the trigger after a turn,
    the emergency line before a model step): recalled blocks first, then the oldest turns.
    `task` is the scoring task the next call carries, when the caller has it already."""
    used = view_tokens(log, judge_task(memory) if task is None else task)
    if percent(used, memory) <= line_percent:
        return ArchiveOutcome("below-trigger")
    adopted = _adopt_orphans(log, session_id, memory, used)  # before any new plan: never twice
    if adopted:
        return ArchiveOutcome("adopted", adopted)
    refused = _guard(log, memory, used)
    if refused is not None:
        _log_skip(memory, refused)
        return ArchiveOutcome(refused)
    settings = memory.settings
    target = max(
        math.ceil(used * settings.compress_percent / 100),
        used - memory.window_tokens * settings.release_target_percent // 100,
    )
    trimmed, removed = rearchive(log, memory, target)
    if removed >= target:
        return ArchiveOutcome("archived", trimmed=trimmed)
    return _archive_turns(log, session_id, memory, used - removed, target - removed, trimmed)


def _archive_turns(
    log: SessionLog, session_id: str, memory: SessionMemory, used: int, target: int, trimmed: int
) -> ArchiveOutcome:
    """Archive the oldest whole turns (never the latest one) until `target` tokens are out."""
    events = log.all_events
    upto = archived_upto(log)
    starts = _turn_starts(log, upto)
    cuts: list[tuple[int, int]] = []  # (cut, tokens removed up to it)
    removed = 0
    for start, end in zip(starts, starts[1:], strict=False):  # the latest turn is never archived
        removed += span_tokens(log, start, end)
        cuts.append((end, removed))
        if removed >= target:
            break
    fitting = _fitting_plan(events, starts[0] if starts else upto, cuts, memory)
    if fitting is None:
        _log_skip(memory, "no-cut")
        return ArchiveOutcome("no-cut", trimmed=trimmed)
    folders = _commit_plan(log, session_id, memory, upto, fitting, used, trimmed)
    if folders is None:
        return ArchiveOutcome("folder-cap", trimmed=trimmed)
    return ArchiveOutcome("archived", folders, trimmed)


def archive_rest(log: SessionLog, session_id: str, memory: SessionMemory) -> int:
    """Archive every turn of an ending session (runtime.agent.rotation) that memory does not hold
    yet, the latest one included, so the customer's next session can recall them; in as many
    runs as the per-run folder limit needs. Idempotent: a plan is keyed by its span, and a crash
    after a commit is adopted, never archived twice. Returns the folders made."""
    if not memory.settings.enabled:
        return 0
    made = 0
    while True:
        used = view_tokens(log, judge_task(memory))
        adopted = _adopt_orphans(log, session_id, memory, used)
        if adopted:
            made += adopted
            continue
        upto = archived_upto(log)
        starts = _turn_starts(log, upto)
        if not starts:
            return made
        cuts, removed = [], 0
        for start, end in zip(starts, [*starts[1:], log.offset], strict=True):
            removed += span_tokens(log, start, end)
            cuts.append((end, removed))
        fitting = _fitting_plan(log.all_events, starts[0], cuts, memory)
        folders = None if fitting is None else _commit_plan(log, session_id, memory, upto, fitting, used)
        if folders is None:  # nothing fits one run, or the customer's folder cap is reached
            return made
        made += folders


def _commit_plan(
    log: SessionLog,
    session_id: str,
    memory: SessionMemory,
    upto: int,
    fitting: tuple[int, int, list[PlannedFolder], dict[str, Path]],
    used: int,
    trimmed: int = 0,
) -> int | None:
    """Commit one planned archive run and mark it in the log; its folder count, None when the
    customer's folder cap refused it."""
    cut, removed, planned, files = fitting
    images = _keep_images(planned, files, memory)
    source = ArchiveSource(session_id=session_id, from_seq=upto, to_seq=cut)
    try:
        folders = memory.store.commit_archive(
            memory.scope, plan_id(source), planned, source, images, memory.settings.max_folders
        )
    except FolderCapReached as full:
        _log_skip(memory, "folder-cap", full.message)
        memory.store.record(memory.scope, "archive-refused", reason="folder-cap", planned=len(planned))
        return None
    _append_archive_event(log, memory, source, len(folders), used - removed)
    memory.store.record(memory.scope, "archive", folders=len(folders), removed_tokens=removed, trimmed=trimmed)
    return len(folders)


def _fitting_plan(
    events: list[SessionEvent], first: int, cuts: list[tuple[int, int]], memory: SessionMemory
) -> tuple[int, int, list[PlannedFolder], dict[str, Path]] | None:
    """The latest cut that fits one run, with its tokens removed, folders and images: one run
    makes at most max_folders_per_run folders, so fewer turns are archived if need be."""
    for cut, removed in reversed(cuts):
        messages, files = _archived_messages(events[first:cut], memory)
        try:
            planned = plan_folders(messages, memory.settings.target_chunk_chars, memory.settings.max_folders_per_run)
        except TooManyFolders:
            continue
        return cut, removed, planned, files
    return None


def plan_id(source: ArchiveSource) -> str:
    key = f"{source.session_id}\x00{source.from_seq}\x00{source.to_seq}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _append_archive_event(
    log: SessionLog, memory: SessionMemory, source: ArchiveSource, folders: int, after_tokens: int
) -> None:
    last = log.last("memory/archive")
    before = last.segments if isinstance(last, MemoryArchive) else 0
    segments = before + folders
    log.append(
        "memory/archive",
        plan_id=plan_id(source),
        upto=source.to_seq,
        folders=folders,
        segments=segments,
        after_percent=round(percent(after_tokens, memory), 1),
        note=f"[memory] {segments} earlier segments archived（可用 memory_recall 按关键词或时间查找）",
    )
    log.flush()


def _adopt_orphans(log: SessionLog, session_id: str, memory: SessionMemory, used: int) -> int:
    """Plans committed for this session whose surface event a crash lost: append it now."""
    adopted = 0
    for source in memory.store.session_plans(session_id):
        if source.from_seq == archived_upto(log) and source.to_seq > source.from_seq:
            folders = memory.store.plan_size(plan_id(source))
            removed = span_tokens(log, source.from_seq, source.to_seq)
            _append_archive_event(log, memory, source, folders, used - removed)
            adopted += folders
    return adopted


_skips_logged: set[tuple[str, str]] = set()


def _log_skip(memory: SessionMemory, reason: str, detail: str = "") -> None:
    """Warn once per scope and reason (source §1.1.1: small windows warn once per session)."""
    if (memory.scope, reason) not in _skips_logged:
        _skips_logged.add((memory.scope, reason))
        logger.warning("memory %s: automatic archive skipped (%s) %s", memory.scope, reason, detail)


# --- recall ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockEntry:
    folder_id: str
    turn: str  # the turn that injected it


def block_entries(log: SessionLog) -> list[BlockEntry]:
    last = log.last("memory/recall")
    return [BlockEntry(**entry) for entry in last.entries] if isinstance(last, MemoryRecall) else []


def _latest_turn(log: SessionLog) -> str | None:
    last = log.last("turn/start")
    return last.turn if isinstance(last, TurnStart) else None


def recall(log: SessionLog, memory: SessionMemory, turn: str, query: str, today: date | None = None) -> list[str]:
    """Bring matching memories into the recall block at the start of a turn; the picks. `today`:
    the day the query was said (see `RecallIndex.scores`)."""
    if not memory.settings.enabled or not query.strip():
        return []
    settings = memory.settings.recall
    entries = block_entries(log)
    earlier = load_state(memory.store, memory.scope).model_copy(update={"block": [e.folder_id for e in entries]})
    index = RecallIndex.of(memory.store, memory.scope, settings.min_alpha)
    picks, state = select(
        index,
        query,
        earlier,
        settings.first_gen_max,
        settings.rotation_slots,
        settings.cooldown_rounds,
        settings.round_budget_chars,
        today,
    )
    before = [e.folder_id for e in entries]
    added = [folder_id for folder_id in picks if folder_id not in before]
    # Chinese text runs about one token a character: the window share is counted in characters.
    char_limit = min(settings.max_chars, memory.window_tokens * settings.max_window_percent // 100)
    kept, dropped = next_block(entries, picks, turn, index.folders, settings.max_blocks, char_limit)
    state = state.with_block([e.folder_id for e in kept], dropped, index.folders)
    if [e.folder_id for e in kept] != before:  # else the block stands as it is: no new event
        _append_block(log, memory, kept)
    save_state(memory.store, memory.scope, state)
    if added:
        memory.store.record(memory.scope, "recall", added=added, dropped=dropped, round=state.round, lanes=state.lanes)
    return picks


def next_block(
    entries: list[BlockEntry],
    picks: list[str],
    turn: str,
    folders: Mapping[str, Folder | IndexedFolder],
    max_blocks: int,
    char_limit: int,
) -> tuple[list[BlockEntry], list[str]]:
    """The block after a round's picks, and the folders it lost. What still matches stays, as
    this turn's; only older blocks that no longer match make room. Unchanged when nothing is new."""
    if all(e.folder_id in folders for e in entries) and set(picks) <= {e.folder_id for e in entries}:
        return entries, []
    entries = [e for e in entries if e.folder_id not in picks] + [BlockEntry(f, turn) for f in picks]
    return fit_block(entries, folders, max_blocks, char_limit, turn)


def fit_block(
    entries: list[BlockEntry],
    folders: Mapping[str, Folder | IndexedFolder],
    max_blocks: int,
    char_limit: int,
    turn: str,
) -> tuple[list[BlockEntry], list[str]]:
    """Drop lowest-priority blocks (σ) until the block fits its limits; this turn's picks go
    last, the weakest match first, and the final block always stays."""
    kept = [e for e in entries if e.folder_id in folders]
    dropped = [e.folder_id for e in entries if e.folder_id not in folders]

    def size() -> int:
        return sum(folders[e.folder_id].chars for e in kept)

    this_turn = [e for e in kept if e.turn == turn]
    for entry in _lowest_priority_first(kept, folders, protect=turn) + this_turn[::-1]:  # picks: strongest first
        if len(kept) <= 1 or (len(kept) <= max_blocks and size() <= char_limit):
            break
        kept.remove(entry)
        dropped.append(entry.folder_id)
    return kept, dropped


def _lowest_priority_first(
    entries: list[BlockEntry], folders: Mapping[str, Folder | IndexedFolder], protect: str | None = None
) -> list[BlockEntry]:
    """Blocks not injected by turn `protect`, in reverse σ order."""
    candidates = [e for e in entries if e.turn != protect and e.folder_id in folders]
    return sorted(candidates, key=lambda e: sigma(folders[e.folder_id]), reverse=True)


def _append_block(log: SessionLog, memory: SessionMemory, entries: list[BlockEntry]) -> None:
    log.append(
        "memory/recall",
        entries=[{"folder_id": e.folder_id, "turn": e.turn} for e in entries],
        text=_render_block(memory, [e.folder_id for e in entries]),
    )
    log.flush()


def _trust_of(beta: float) -> str:
    return "可信" if beta >= 3 else "不可当事实" if beta <= -3 else "仅供参考"


def render_memory(folder: Folder | IndexedFolder, text: str, zone: ZoneInfo, details: str = "") -> str:
    """One memory as the model reads it, in the recall block and in `memory_recall` results."""
    start = datetime.fromtimestamp(folder.event_from / 1000, zone)
    end = datetime.fromtimestamp(folder.event_to / 1000, zone)
    return (
        f'<memory id="{folder.id}" title="{folder.title}" time="{start:%Y-%m-%d %H:%M}~{end:%Y-%m-%d %H:%M}"'
        f'{details} beta="{folder.beta:+.1f}" trust="{_trust_of(folder.beta)}">\n{text.rstrip()}\n</memory>'
    )


def _render_block(memory: SessionMemory, folder_ids: list[str]) -> str:
    folders = [f for f in map(memory.store.folder, folder_ids) if f is not None]
    if not folders:
        return ""
    blocks = [render_memory(f, memory.store.text(f.id), memory.zone) for f in folders]
    return "\n".join([BLOCK_HEADER, *blocks])


def rearchive(log: SessionLog, memory: SessionMemory, target: int) -> tuple[int, int]:
    """Trim recalled blocks, lowest priority first and never those the latest turn injected,
    until `target` tokens are out; their folders are marked for re-review. (count, tokens)."""
    entries = block_entries(log)
    latest = _latest_turn(log)
    folders = {f.id: f for f in memory.store.folders(memory.scope)}
    candidates = _lowest_priority_first(entries, folders, protect=latest)
    removed_ids: list[str] = []
    removed = 0
    for entry in candidates:
        if removed >= target:
            break
        removed_ids.append(entry.folder_id)
        removed += text_tokens(memory.store.text(entry.folder_id))
    if not removed_ids:
        return 0, 0
    kept = [e for e in entries if e.folder_id not in removed_ids]
    memory.store.mark_review(removed_ids)
    _append_block(log, memory, kept)
    state = load_state(memory.store, memory.scope).with_block([e.folder_id for e in kept], removed_ids, folders)
    save_state(memory.store, memory.scope, state)
    memory.store.record(memory.scope, "rearchive", removed=removed_ids, removed_tokens=removed, target=target)
    return len(removed_ids), removed


# --- scoring task ----------------------------------------------------------------------------


def judge_task(memory: SessionMemory | None) -> str:
    """The scoring task section for a model that scores: pending and review folders."""
    if memory is None or not memory.model_scores or not memory.settings.enabled:
        return ""
    folders = memory.store.folders(memory.scope)
    # Newest first (source §1.2): what was just archived is what the model still has in mind;
    # the heuristic takes a backlog the model leaves (HEURISTIC_AFTER_S). With reviews waiting
    # too, new memories take at most 60% of the items.
    pending = sorted((f for f in folders if not f.scored), key=lambda f: (f.created_at, f.seq), reverse=True)
    review = [f for f in folders if f.scored and f.review]
    items = memory.settings.judge_task_items
    share = max(1, items * 6 // 10) if review else items
    waiting = pending[:share] + review
    if not waiting:
        return ""
    lines = [JUDGE_HEADER]
    # The task must not fill the window it is meant to relieve: items get a share of it (source
    # §1.2: 15% of the window), at least one item.
    budget = memory.window_tokens * JUDGE_WINDOW_PERCENT // 100
    for folder in waiting[: memory.settings.judge_task_items]:
        if len(lines) > 1 and sum(map(text_tokens, lines[1:])) >= budget:
            break
        excerpt = " ".join(memory.store.text(folder.id).split())[:200]
        if folder.scored:
            lines.append(
                f"- 复核 id={folder.id} · 标题={folder.title} · 现有 α={folder.alpha} β={folder.beta:+.1f}"
                f" · 关键词={'、'.join(folder.keywords)} · 原文={excerpt}"
            )
        else:
            lines.append(f"- 待评分 id={folder.id} · 标题={folder.title} · 原文={excerpt}")
    return "\n".join(lines)
