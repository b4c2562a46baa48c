"""A customer's current agent session: where its log lives, and opening it for writing.

A session log damaged before its tail (runtime.agent.session_log) is never cut: the session is
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
from typing import NamedTuple

from runtime.agent.session_log import CorruptSessionLog, SessionLog
from runtime.errors import CustomerUnknown
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection
from runtime.store.leases import Fence, before_file_write, fenced
from runtime.store.states import RotationReason, SessionOrigin
from runtime.store.tables import DamagedSession, SessionHeader

log = logging.getLogger(__name__)

DAMAGED_NOTE = (
    "[kefu] 本会话之前的会话记录已损坏，更早的对话上下文不可用。"
    "需要时用 im_query_history 查看与这位顾客的历史消息；不要重复发送顾客可能已经收到的内容。"
)


def session_path(sessions_dir: Path, session_id: str) -> Path:
    return sessions_dir / f"{session_id}.jsonl.zst"


def damaged_folder(sessions_dir: Path) -> Path:
    return sessions_dir / "damaged"


class KnownSession(NamedTuple):
    """The customer's current session as the caller's fenced write read or began it (saving
    open_session a transaction)."""

    session_id: str
    first: bool  # begun just now: the customer's first
    header: SessionHeader | None  # None: a session of a store from before headers


def _ensure_session_id(
    store: DeliveryStore, customer_id: int, fence: Fence | None = None, model: str | None = None
) -> KnownSession:
    """The customer's session, begun now if they have none (their first)."""
    with fenced(store, fence) as conn:
        session_id: str | None = conn.execute(queries.customer.SESSION_ID, {"c": customer_id}).scalar_one()
        if session_id is not None:
            return KnownSession(session_id, False, session_header(conn, session_id))
        header = begin_first_session(conn, customer_id, model)
        return KnownSession(header.id, True, header)


def begin_first_session(
    conn: Connection, customer_id: int, model: str | None, profile: str | None = None
) -> SessionHeader:
    """Inside the caller's write transaction, for a customer who has no session yet; `model`
    and `profile` (runtime.agent.profiles) are the agent's it begins under."""
    header = SessionHeader(
        id=f"s{customer_id}-1",
        customer_id=customer_id,
        created_at=now_ms(),
        model=model,
        origin=SessionOrigin.FIRST,
        profile=profile,
    )
    begin_session(conn, header, None)
    return header


def begin_session(conn: Connection, header: SessionHeader, replacing: str | None) -> bool:
    """Inside the caller's write transaction: record the new session's header and make it the
    customer's current one, if `replacing` is still their current one (None: they have none).
    False, and nothing written, if another job changed the customer's session meanwhile."""
    switched = conn.execute(
        queries.customer.SWITCH_SESSION, {"new": header.id, "c": header.customer_id, "old": replacing}
    ).rowcount
    if switched:
        conn.execute(queries.agent_session.RECORD, header.model_dump())
    return bool(switched)


def session_header(conn: Connection, session_id: str) -> SessionHeader | None:
    row = conn.execute(queries.agent_session.BY_ID, {"s": session_id}).mappings().first()
    return SessionHeader.model_validate(dict(row)) if row else None


def customer_sessions(conn: Connection, customer_id: int) -> list[SessionHeader]:
    """The customer's sessions, oldest first (the current one is customer.session_id)."""
    rows = conn.execute(queries.agent_session.OF_CUSTOMER, {"c": customer_id}).mappings()
    return [SessionHeader.model_validate(dict(row)) for row in rows]


def next_session_id(conn: Connection, customer_id: int) -> str:
    """A session id the customer never had: one past the highest number of their sessions."""
    numbers = [_number(h.id) for h in customer_sessions(conn, customer_id)]
    current = conn.execute(queries.customer.SESSION_ID, {"c": customer_id}).scalar()
    if current is not None:
        numbers.append(_number(current))
    return f"s{customer_id}-{max(numbers, default=0) + 1}"


def _number(session_id: str) -> int:
    _, _, number = session_id.rpartition("-")
    return int(number) if number.isdigit() else 1


@dataclass
class OpenSession:
    log: SessionLog  # loaded, torn tail cut, ready to append
    session_id: str
    replaced: DamagedSession | None = None  # the damaged session this one continues
    first: bool = False  # the customer's first session, begun now: no turn of it replied yet
    header: SessionHeader | None = None  # None: a session of a store from before headers


def open_session(
    store: DeliveryStore,
    customer_id: int,
    sessions_dir: Path,
    fence: Fence | None,
    known: KnownSession | None = None,
) -> OpenSession:
    """The customer's current session, opened for appending under `fence`; a damaged one is
    retired first and a new, empty session opened in its place."""
    guard = partial(before_file_write, fence) if fence is not None else nullcontext
    session_id, first, header = known or _ensure_session_id(store, customer_id, fence)
    log = SessionLog(session_path(sessions_dir, session_id), guard)
    try:
        log.open_for_append()
    except CorruptSessionLog as error:
        session_id = _retire_damaged(store, customer_id, session_id, sessions_dir, str(error), fence).replaced_by
        log = SessionLog(session_path(sessions_dir, session_id), guard)
        log.open_for_append()
        with store.read() as conn:
            header = session_header(conn, session_id)
    # Looked up until the new session has its first event, whichever job retired the old one
    # (a customer's first session replaces none).
    replaced = None if log.events or first else _replaced_session(store, session_id)
    return OpenSession(log, session_id, replaced, first, header)


def _replaced_session(store: DeliveryStore, session_id: str) -> DamagedSession | None:
    with store.read() as conn:
        row = conn.execute(queries.damaged_session.REPLACED_BY, {"s": session_id})
        found = row.mappings().first()
    return DamagedSession.model_validate(dict(found)) if found else None


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
    fsync_folder(kept.parent)
    with fenced(store, fence) as conn:
        old = session_header(conn, session_id)
        record = DamagedSession(
            session_id=session_id,
            customer_id=customer_id,
            replaced_by=next_session_id(conn, customer_id),
            kept_path=str(kept),
            problem=problem,
            detected_at=now_ms(),
        )
        header = SessionHeader(
            id=record.replaced_by,
            customer_id=customer_id,
            created_at=record.detected_at,
            model=old.model if old else None,
            profile=old.profile if old else None,
            origin=SessionOrigin.ROTATED,
            reason=RotationReason.DAMAGED,
            parent=session_id,
        )
        conn.execute(queries.damaged_session.RECORD, record.model_dump())
        begin_session(conn, header, session_id)
    path.unlink(missing_ok=True)
    log.error(
        "session %s of customer %s is damaged before its tail; kept at %s, continuing in %s",
        session_id,
        customer_id,
        kept,
        record.replaced_by,
    )
    return record


def fsync_folder(folder: Path) -> None:
    """A rename or a new file in `folder` survives a power cut only once the folder is synced."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def damaged_sessions(conn: Connection) -> list[DamagedSession]:
    rows = conn.execute(queries.damaged_session.ALL).mappings()
    return [DamagedSession.model_validate(dict(row)) for row in rows]


class SessionRow(SessionHeader):
    """A session as `kefu sessions list` shows it."""

    current: bool
    events: int | None  # None: its log cannot be read (damaged; kept aside)


def list_sessions(store: DeliveryStore, sessions_dir: Path, customer_id: int) -> list[SessionRow]:
    """The customer's sessions, oldest first, with which is current and each log's size."""
    with store.read() as conn:
        current = conn.execute(queries.customer.SESSION_ID, {"c": customer_id}).first()
        headers = customer_sessions(conn, customer_id)
    if current is None:
        raise CustomerUnknown(customer_id)
    rows = []
    for header in headers:
        try:
            events: int | None = len(SessionLog(session_path(sessions_dir, header.id)).load())
        except (CorruptSessionLog, OSError):
            events = None
        rows.append(SessionRow(**header.model_dump(), current=header.id == current[0], events=events))
    return rows
