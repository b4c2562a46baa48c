"""Retention: records older than the shop keeps them, pruned by beat (default: kept forever).

What a policy may prune, each with its own number of days (KEFU_RETENTION__*_DAYS):
- delivery rows: buyer messages no batch still waits on, replies whose outcome is settled
  (with their attempts, read checks and read receipts), and finished batches;
- media: stored copies of images and files no reply refers to any more (its reply pruned first);
- memory images: images archived with long-term memories (the memories themselves stay);
- retired sessions: damaged session logs kept aside, and logs of sessions that ended (the customer
  went on in a new one: runtime.agent.rotation); their headers stay.

Never pruned: anything in flight (pending or claimed input, an open batch, a reply being sent
or of unknown outcome), the customers themselves (an erasure removes a buyer: runtime.customers.erasure),
page receipts (ids only, they keep a redelivered page out) and current sessions. Each kind is
pruned in small transactions, so a large backlog never holds the store's write lock for long.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel

from config import RetentionSettings
from runtime.agent.sessions import damaged_folder, session_path
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.states import SETTLED

CHUNK = 1000  # rows per transaction
DAY_MS = 86_400_000
_OLD_REPLIES = queries.outbox_request.prunable(tuple(state.value for state in sorted(SETTLED)))
# What hangs on a chunk of replies (`:ids`), children first; then the replies themselves.
_OF_REPLIES = (
    queries.read_check.DELETE_OF_REQUESTS,
    queries.outbox_attempt.DELETE_OF_REQUESTS,
    queries.buyer_read.DELETE_OF_REQUESTS,
    queries.pending_question.DELETE_OF_REQUESTS,
    queries.outbox_request.DELETE_LISTED,
)
_DELIVERY = (
    # Input no batch waits on: pruned first, so a batch is finished and empty when its turn comes.
    ("messages", queries.inbound_message.PRUNE),
    ("batches", queries.admission_batch.PRUNE),
)


class Pruned(BaseModel):
    messages: int = 0
    replies: int = 0
    batches: int = 0
    media: int = 0
    sessions: int = 0
    memory_images: int = 0


def prune(
    store: DeliveryStore,
    sessions_dir: Path,
    policy: RetentionSettings,
    now: int | None = None,
    memory_images_dir: Path | None = None,
) -> Pruned:
    """One pass of the policy: what it pruned. Idempotent, and nothing when no days are set."""
    now = now_ms() if now is None else now
    pruned = Pruned()
    if policy.delivery_days is not None:
        cutoff = now - policy.delivery_days * DAY_MS
        pruned.replies = _replies(store, cutoff)
        for kind, statement in _DELIVERY:
            setattr(pruned, kind, _in_chunks(store, statement, cutoff))
    if policy.media_days is not None:
        pruned.media = _in_chunks(store, queries.media.PRUNE, now - policy.media_days * DAY_MS)
    if policy.sessions_days is not None:
        pruned.sessions = _retired_sessions(store, sessions_dir, now - policy.sessions_days * DAY_MS)
    if policy.memory_images_days is not None and memory_images_dir is not None:
        pruned.memory_images = _memory_images(memory_images_dir, now - policy.memory_images_days * DAY_MS)
    return pruned


def _memory_images(images_dir: Path, cutoff: int) -> int:
    """Images archived with memories (`memory-images/<scope>/…`) kept longer than the policy. The
    memory that names one stays; `memory_image` then reports the file as gone (exists=False)."""
    removed = 0
    for path in sorted(images_dir.rglob("*")) if images_dir.is_dir() else []:
        if path.is_file() and not path.name.endswith(".partial") and os.stat(path).st_mtime * 1000 < cutoff:
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def _in_chunks(store: DeliveryStore, statement: str, cutoff: int) -> int:
    total = 0
    while True:
        with store.write() as conn:
            deleted = conn.execute(statement, {"cutoff": cutoff, "n": CHUNK}).rowcount
        total += deleted
        if deleted < CHUNK:
            return total


def _replies(store: DeliveryStore, cutoff: int) -> int:
    """Settled replies no later one retries or follows, with what hangs on them (children first)."""
    total = 0
    while True:
        with store.write() as conn:
            ids = list(conn.execute(_OLD_REPLIES, {"cutoff": cutoff, "n": CHUNK}).scalars())
            chunk = {"ids": json.dumps(ids)}
            for statement in _OF_REPLIES:
                conn.execute(statement, chunk)
        total += len(ids)
        if len(ids) < CHUNK:
            return total


def _retired_sessions(store: DeliveryStore, sessions_dir: Path, cutoff: int) -> int:
    """Damaged session logs kept aside longer than the policy: the file, then its record."""
    folder = damaged_folder(sessions_dir)
    removed = 0
    for path in sorted(folder.glob("s*-*.jsonl.zst")) if folder.is_dir() else []:
        if os.stat(path).st_mtime * 1000 >= cutoff:
            continue
        path.unlink(missing_ok=True)
        with store.write() as conn:
            conn.execute(queries.damaged_session.DELETE_KEPT, {"p": str(path)})
        removed += 1
    return removed + _ended_sessions(store, sessions_dir, cutoff)


def _ended_sessions(store: DeliveryStore, sessions_dir: Path, cutoff: int) -> int:
    """Logs of sessions that ended (rotated or forked away from) and were not written to since
    the cutoff. Their headers stay: a session that existed is still named, its log is gone. A
    customer's current session is never pruned (nothing ends it but a new one)."""
    with store.read() as conn:
        ended = list(conn.execute(queries.agent_session.ENDED_BEFORE, {"cutoff": cutoff}).scalars())
    removed = 0
    for session_id in ended:
        path = session_path(sessions_dir, session_id)
        if path.exists() and os.stat(path).st_mtime * 1000 < cutoff:
            path.unlink(missing_ok=True)
            removed += 1
    return removed
