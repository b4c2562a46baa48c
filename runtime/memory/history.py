"""Conversation the agent never saw in a turn, into memory: imported history
(runtime.inbound.history_import) and what an observing route stored (runtime.admission.routes).

A turn's conversation reaches memory when its session archives it (runtime.memory.engine). Input
that never becomes a turn has no session to archive from, so it is archived here the same way:
its messages as the labelled lines a turn would have seen (runtime.agent.rendering), cut into
folders by the same planner, committed as one plan with the same store call, left pending for the
same scorers (the heuristic at once under the `rules` agent, as a memory job does; else the
model's judge task and the heuristic backlog, as for any archive).

A plan's source is not a session but a named range, so a retry commits nothing twice:
- an import's batch: `import:<file checksum>:<customer>` and the rows' positions in the file;
- an observing route's day: `observed:<scope>` and the civil day's bounds in ms. A day is
  remembered once it has ended, so its content is final; the newest day remembered is where the
  next pass starts (plans move with their scope when an account changes shards, and times do not
  change there, where message ids do).

The customer's writer lease is held while its rows are read and its folders committed, as every
memory job holds it: an erasure waits for it, so no folder of an erased buyer is made again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runtime.agent.rendering import RenderableMessage, content_text, render_line
from runtime.memory.engine import MemoryEngine, SessionMemory, plan_id
from runtime.memory.folders import ArchivedMessage, TooManyFolders, plan_folders
from runtime.memory.heuristic import score_backlog
from runtime.memory.store import ArchiveSource, FolderCapReached
from runtime.store import DeliveryStore, leases, queries

log = logging.getLogger(__name__)

DAY_MS = 86_400_000
LOOKBACK_DAYS = 8  # observed days older than this that are still not remembered are given up


@dataclass(frozen=True)
class Remembered:
    """What remembering a customer's rows did: folders made, or why nothing was."""

    folders: int = 0
    refused: str | None = None  # "busy" (its writer lease is held) or "folder-cap"


def archived(row: dict[str, Any], memory: SessionMemory) -> ArchivedMessage:
    """A stored message as memory keeps it: the labelled line a turn would have read."""
    message = RenderableMessage.model_validate(row)
    return ArchivedMessage(
        role="user",
        text=render_line(message, memory.zone),
        at_ms=max(message.received_at, 0),
        headline=content_text(message.content_type, message.body),
    )


def _commit(memory: SessionMemory, source: ArchiveSource, messages: Sequence[ArchivedMessage]) -> int:
    """Commit the messages as one plan (nothing if the plan is there already); a range too long
    for one run is split in halves, each a plan of its own, under a marker plan of the range."""
    settings = memory.settings
    try:
        planned = plan_folders(list(messages), settings.target_chunk_chars, settings.max_folders_per_run)
    except TooManyFolders:
        half = len(messages) // 2
        part = f"{source.session_id}#{source.from_seq}-{source.to_seq}"
        made = _commit(memory, ArchiveSource(session_id=part, from_seq=0, to_seq=half), messages[:half])
        made += _commit(memory, ArchiveSource(session_id=part, from_seq=half, to_seq=len(messages)), messages[half:])
        memory.store.commit_archive(memory.scope, plan_id(source), [], source)
        return made
    folders = memory.store.commit_archive(
        memory.scope, plan_id(source), planned, source, max_folders=settings.max_folders
    )
    return len(folders)


def remember(memory: SessionMemory, source: ArchiveSource, rows: Sequence[dict[str, Any]]) -> Remembered:
    """Rows (RenderableMessage fields) into the scope's memory as the plan `source`; a scope whose
    folder cap is reached gets nothing (and a telemetry row, as an archive run records it)."""
    if not rows:
        return Remembered()
    messages = [archived(row, memory) for row in rows]
    try:
        made = _commit(memory, source, messages)
    except FolderCapReached:
        memory.store.record(memory.scope, "archive-refused", reason="folder-cap", planned=len(messages))
        return Remembered(refused="folder-cap")
    if made:
        memory.store.record(memory.scope, "history", folders=made, messages=len(messages))
    if not memory.model_scores:  # the rules agent: scored now, as a memory job scores what it archived
        score_backlog(memory.store, memory.scope)
    return Remembered(made)


def remember_imported(
    store: DeliveryStore,
    engine: MemoryEngine,
    customer_id: int,
    source: ArchiveSource,
    keys: tuple[str, str, list[str]],
    lease_s: float,
) -> Remembered:
    """An import batch's rows of one conversation (`keys`: account, conversation, platform message
    ids) that are stored as history, under the customer's writer lease. Rows the conversation had
    before as live input are the session's to archive, never twice."""
    account, conversation, ids = keys
    memory = engine.session(customer_id)
    with leases.held(store, f"customer:{customer_id}", lease_s) as fence:
        if fence is None:
            return Remembered(refused="busy")
        with store.read() as conn:
            params = {"a": account, "c": conversation, "ids": json.dumps(ids)}
            rows = [dict(r) for r in conn.execute(queries.inbound_message.HISTORY_OF_KEYS, params).mappings()]
        return remember(memory, source, rows)


def day_start(at_ms: int, engine: MemoryEngine) -> int:
    """The start (ms) of the civil day in the shop's zone that holds `at_ms`."""
    local = datetime.fromtimestamp(at_ms / 1000, tz=engine.zone)
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
    return int(midnight.timestamp() * 1000)


def next_day(start_ms: int, engine: MemoryEngine) -> int:
    """The next civil day's start after the day starting at `start_ms` (a day of 23 or 25 hours
    where the zone changes its clocks: 26 hours on is always within the next day)."""
    return day_start(start_ms + DAY_MS + DAY_MS // 12, engine)


def observed_customers(store: DeliveryStore, engine: MemoryEngine, now_ms: int) -> list[int]:
    """Customers with observed input on a day that has ended, within the look-back."""
    until = day_start(now_ms, engine)
    since = until - LOOKBACK_DAYS * DAY_MS
    with store.read() as conn:
        found = conn.execute(queries.inbound_message.OBSERVED_CUSTOMERS, {"since": since, "until": until})
        return [int(c) for c in found.scalars()]


def _remembered_until(memory: SessionMemory, session: str) -> int:
    """The end of the newest observed day memory holds (0: none)."""
    return max((plan.to_seq for plan in memory.store.session_plans(session)), default=0)


def remember_observed(store: DeliveryStore, engine: MemoryEngine, customer_id: int, now_ms: int, lease_s: float) -> int:
    """The customer's observed input of each day that ended and memory does not hold yet, a plan
    per day. Returns the folders made; 0 when its writer lease is busy (the next pass tries)."""
    memory = engine.session(customer_id)
    session = f"observed:{memory.scope}"
    until = day_start(now_ms, engine)
    if _remembered_until(memory, session) >= until:  # the usual pass: a read, no lease taken
        return 0
    made = 0
    with leases.held(store, f"customer:{customer_id}", lease_s) as fence:
        if fence is None:
            return 0
        since = max(_remembered_until(memory, session), until - LOOKBACK_DAYS * DAY_MS)
        with store.read() as conn:
            params = {"c": customer_id, "since": since, "until": until}
            rows = [dict(r) for r in conn.execute(queries.inbound_message.OBSERVED_OF_CUSTOMER, params).mappings()]
        days: dict[int, list[dict[str, Any]]] = {}
        for row in rows:
            days.setdefault(day_start(row["received_at"], engine), []).append(row)
        for start, of_day in sorted(days.items()):
            source = ArchiveSource(session_id=session, from_seq=start, to_seq=next_day(start, engine))
            result = remember(memory, source, of_day)
            if result.refused:
                log.warning("observed input of customer %s not remembered: %s", customer_id, result.refused)
                break
            made += result.folders
    return made
