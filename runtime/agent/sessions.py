"""A customer's current agent session: where its log lives, and opening it for writing.

A session log damaged before its tail (runtime.session_log) is never cut: the session is
retired. Its file is kept byte for byte under `damaged/`, the damage is recorded in the
delivery store (shown by `kefu status`), and the customer continues in a new session whose
system message says that earlier context was lost. The buyer's history stays in the delivery
store and long-term memory is per customer, so both survive the new session.
"""

from __future__ import annotations

import logging
import os
import shutil
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from runtime.leases import Fence, before_file_write, fenced
from runtime.session_log import CorruptSessionLog, SessionLog
from runtime.store import DeliveryStore, now_ms
from runtime.store.connection import Connection
from runtime.store.sql import sql
from runtime.store.tables import DamagedSession

log = logging.getLogger(__name__)

DAMAGED_NOTE = (
    "[kefu] 本会话之前的会话记录已损坏，更早的对话上下文不可用。"
    "需要时用 im_query_history 查看与这位顾客的历史消息；不要重复发送顾客可能已经收到的内容。"
)


def session_path(sessions_dir: Path, session_id: str) -> Path:
    return sessions_dir / f"{session_id}.jsonl.zst"


def damaged_folder(sessions_dir: Path) -> Path:
    return sessions_dir / "damaged"


def _ensure_session_id(store: DeliveryStore, customer_id: int, fence: Fence | None = None) -> tuple[str, bool]:
    """The customer's session id, and whether it was given just now (the customer's first)."""
    with fenced(store, fence) as conn:
        session_id: str | None = conn.execute(
            sql("SELECT session_id FROM customer WHERE id = :c"), {"c": customer_id}
        ).scalar_one()
        return (session_id, False) if session_id is not None else (begin_first_session(conn, customer_id), True)


def begin_first_session(conn: Connection, customer_id: int) -> str:
    """Inside the caller's write transaction, for a customer who has no session yet."""
    session_id = f"s{customer_id}-1"
    conn.execute(sql("UPDATE customer SET session_id = :s WHERE id = :c"), {"s": session_id, "c": customer_id})
    return session_id


@dataclass
class OpenSession:
    log: SessionLog  # loaded, torn tail cut, ready to append
    session_id: str
    replaced: DamagedSession | None = None  # the damaged session this one continues
    first: bool = False  # the customer's first session, begun now: no turn of it replied yet


def open_session(
    store: DeliveryStore,
    customer_id: int,
    sessions_dir: Path,
    fence: Fence | None,
    known: tuple[str, bool] | None = None,
) -> OpenSession:
    """The customer's current session, opened for appending under `fence`; a damaged one is
    retired first and a new, empty session opened in its place. `known`: the customer's session
    id and whether it is their first, as the caller's fenced write read or began it (saving a
    transaction)."""
    guard = partial(before_file_write, fence) if fence is not None else nullcontext
    session_id, first = known or _ensure_session_id(store, customer_id, fence)
    log = SessionLog(session_path(sessions_dir, session_id), guard)
    try:
        log.open_for_append()
    except CorruptSessionLog as error:
        session_id = _retire_damaged(store, customer_id, session_id, sessions_dir, str(error), fence).replaced_by
        log = SessionLog(session_path(sessions_dir, session_id), guard)
        log.open_for_append()
    # Looked up until the new session has its first event, whichever job retired the old one
    # (a customer's first session replaces none).
    replaced = None if log.events or first else _replaced_session(store, session_id)
    return OpenSession(log, session_id, replaced, first)


def _replaced_session(store: DeliveryStore, session_id: str) -> DamagedSession | None:
    with store.read() as conn:
        row = conn.execute(sql("SELECT * FROM damaged_session WHERE replaced_by = :s"), {"s": session_id})
        found = row.mappings().first()
    return DamagedSession.model_validate(dict(found)) if found else None


def _next_session_id(customer_id: int, session_id: str) -> str:
    _, _, number = session_id.rpartition("-")
    return f"s{customer_id}-{int(number) + 1 if number.isdigit() else 2}"


def _retire_damaged(
    store: DeliveryStore, customer_id: int, session_id: str, sessions_dir: Path, problem: str, fence: Fence | None
) -> DamagedSession:
    """Keep the damaged file aside (a copy made durable before anything else changes), then in
    one transaction record the damage and move the customer to a new session, then remove the
    original. A crash anywhere in between leaves the damage to be found again, never lost."""
    path = session_path(sessions_dir, session_id)
    kept = damaged_folder(sessions_dir) / path.name
    kept.parent.mkdir(parents=True, exist_ok=True)
    partial = kept.with_suffix(".partial")
    shutil.copyfile(path, partial)
    with open(partial, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(partial, kept)
    _fsync_folder(kept.parent)
    record = DamagedSession(
        session_id=session_id,
        customer_id=customer_id,
        replaced_by=_next_session_id(customer_id, session_id),
        kept_path=str(kept),
        problem=problem,
        detected_at=now_ms(),
    )
    with fenced(store, fence) as conn:
        conn.execute(
            sql(
                "INSERT OR IGNORE INTO damaged_session (session_id, customer_id, replaced_by, kept_path, problem,"
                " detected_at) VALUES (:session_id, :customer_id, :replaced_by, :kept_path, :problem, :detected_at)"
            ),
            record.model_dump(),
        )
        conn.execute(
            sql("UPDATE customer SET session_id = :new WHERE id = :c AND session_id = :old"),
            {"new": record.replaced_by, "c": customer_id, "old": session_id},
        )
    path.unlink(missing_ok=True)
    log.error(
        "session %s of customer %s is damaged before its tail; kept at %s, continuing in %s",
        session_id,
        customer_id,
        kept,
        record.replaced_by,
    )
    return record


def _fsync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def damaged_sessions(conn: Connection) -> list[DamagedSession]:
    rows = conn.execute(sql("SELECT * FROM damaged_session ORDER BY detected_at")).mappings()
    return [DamagedSession.model_validate(dict(row)) for row in rows]
