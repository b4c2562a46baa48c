"""Memory work outside a turn (the `kefu.memory` tasks run these): archive a customer's session
after a turn that ended above the trigger, re-archive its recall block, score backlogs.

Each job is idempotent: it re-reads the session log and the memory store and does only what
is still due. Jobs that touch a session log take the customer's writer lease, the same one a
turn holds, so a session never has two writers.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from runtime import leases
from runtime.agent.memory import (
    ArchiveOutcome,
    MemoryEngine,
    SessionMemory,
    archive,
    context_tokens,
    rearchive,
    scope_of,
)
from runtime.agent.turn import repair, session_path
from runtime.memory.heuristic import score_pending
from runtime.memory.judge import MAX_UPDATES
from runtime.session_log import SessionLog
from runtime.store import DeliveryStore, now_ms
from runtime.store.sql import sql

Busy = Literal["busy", "no-session"]


def _session_of(store: DeliveryStore, customer_id: int) -> str | None:
    with store.read() as conn:
        return conn.execute(sql("SELECT session_id FROM customer WHERE id = :c"), {"c": customer_id}).scalar()


def _with_session(
    store: DeliveryStore, sessions_dir: Path, customer_id: int, lease_s: float
) -> tuple[SessionLog, str, str] | Busy:
    session_id = _session_of(store, customer_id)
    if session_id is None or not session_path(sessions_dir, session_id).exists():
        return "no-session"
    owner = leases.new_owner()
    if not leases.acquire(store, f"customer:{customer_id}", owner, lease_s):
        return "busy"
    log = SessionLog(session_path(sessions_dir, session_id))
    log.open_for_append()
    repair(log)  # a turn that crashed mid-way is closed the same way its next turn would
    return log, session_id, owner


def archive_customer(
    store: DeliveryStore, engine: MemoryEngine, sessions_dir: Path, customer_id: int, lease_s: float
) -> ArchiveOutcome | Busy:
    """Archive the customer's session if it is above the trigger; score under the heuristic
    when no model scores."""
    held = _with_session(store, sessions_dir, customer_id, lease_s)
    if isinstance(held, str):
        return held
    log, session_id, owner = held
    memory = engine.session(customer_id)
    try:
        outcome = archive(log, session_id, memory, memory.settings.trigger_percent)
    finally:
        leases.release(store, f"customer:{customer_id}", owner)
    if not engine.model_scores:
        score_scope(memory)
    return outcome


def rearchive_customer(
    store: DeliveryStore, engine: MemoryEngine, sessions_dir: Path, customer_id: int, lease_s: float
) -> int | Busy:
    """Trim the recall block by the compress share of the context: how many blocks went."""
    held = _with_session(store, sessions_dir, customer_id, lease_s)
    if isinstance(held, str):
        return held
    log, _, owner = held
    memory = engine.session(customer_id)
    try:
        target = math.ceil(context_tokens(log, memory) * memory.settings.compress_percent / 100)
        trimmed, _ = rearchive(log, memory, target)
    finally:
        leases.release(store, f"customer:{customer_id}", owner)
    if not engine.model_scores:
        score_scope(memory)
    return trimmed


def score_scope(memory: SessionMemory) -> int:
    """Heuristic scores for every pending or review folder of a scope; how many were scored."""
    scored = 0
    while True:
        result = score_pending(memory.store, memory.scope, MAX_UPDATES)
        scored += len(result.updated)
        if len(result.updated) < MAX_UPDATES:
            break
    if scored:
        memory.store.record(memory.scope, "judge", source="heuristic", updated=scored)
    return scored


def backlog(engine: MemoryEngine) -> list[str]:
    """Scopes whose pending folders the heuristic should score now: all of them when no model
    scores, else those a model left pending longer than `heuristic_after_s`."""
    cutoff = None if not engine.model_scores else now_ms() - int(engine.settings.heuristic_after_s * 1000)
    return list(engine.store.pending(cutoff))


def scope_memory(engine: MemoryEngine, scope: str) -> SessionMemory:
    customer_id = int(scope.removeprefix("customer-"))
    if scope_of(customer_id) != scope:
        raise ValueError(f"not a customer scope: {scope!r}")
    return engine.session(customer_id)
