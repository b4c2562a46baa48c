"""Input pause (SPEC 3.11): stop taking in new pages, for one account or the whole host, e.g.
to upgrade safely, without losing any.

While paused, a page is held instead of persisted: ingestion checks the pause inside the
page's transaction, so the page is held whole and its cursor stays. Admission stops too.
Turns already admitted finish, and `in_flight` says what is still on its way. Resuming returns
the held pages for publishing again; a held page leaves the table once it is ingested.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from pydantic import BaseModel

from runtime.accounts.registry import require_account
from runtime.customers.erasure import without_erased
from runtime.errors import KefuError
from runtime.inbound.inbox import record_received
from runtime.inbound.pages import InboundPage
from runtime.placement.shards import local_placement
from runtime.store import DeliveryStore, now_ms
from runtime.store.connection import Connection
from runtime.store.sql import sql
from runtime.store.states import PlacementState

HOST = "*"
_PAUSED = "SELECT 1 FROM input_pause WHERE scope IN ('*', :a) LIMIT 1"  # host or this account


class InputPaused(Exception):
    """Raised inside ingestion when input is paused: the page is to be held, not persisted."""


class PauseState(BaseModel):
    scope: str  # "*" for the host, else the account id
    paused_at: int
    by_move: bool = False  # the account is between shards: only the move resumes it


def _scope(account_id: str | None) -> str:
    return HOST if account_id is None else account_id


def is_paused(conn: Connection, account_id: str) -> bool:
    return conn.execute(sql(_PAUSED), {"a": account_id}).first() is not None


# Read with the page's account (runtime.inbound.ingest): a transaction's statement fewer per page.
PAUSED_OR_HELD_COLUMNS = (
    f"EXISTS ({_PAUSED}) AS input_paused, EXISTS (SELECT 1 FROM held_page"
    " WHERE account_id = :a AND stream_id = :s AND page_op_id = :p) AS page_held"
)


def held_unless_paused(account_id: str, input_paused: bool, page_held: bool) -> bool:
    """For ingestion's transaction, from PAUSED_OR_HELD_COLUMNS: raises InputPaused while input
    is paused; else whether the page was held by an earlier pause (its ingestion releases it)."""
    if input_paused:
        raise InputPaused(account_id)
    return page_held


def pause_input(store: DeliveryStore, account_id: str | None = None) -> PauseState:
    """Pause the host's input (no account) or one account's. Idempotent; a host pause and an
    account pause never coexist (KEFU_INPUT_PAUSE_CONFLICT)."""
    scope = _scope(account_id)
    with store.write() as conn:
        if account_id is not None:
            require_account(conn, account_id)
        other = conn.execute(
            sql("SELECT scope FROM input_pause WHERE scope != :s AND (:s = '*' OR scope = '*') LIMIT 1"), {"s": scope}
        ).scalar_one_or_none()
        if other is not None:
            held_by = "the host" if other == HOST else f"account {other!r}"
            raise KefuError(
                "KEFU_INPUT_PAUSE_CONFLICT",
                f"input is already paused for {held_by}; a host pause and an account pause do not mix",
                "resume that pause first",
            )
        conn.execute(
            sql("INSERT OR IGNORE INTO input_pause (scope, paused_at) VALUES (:s, :at)"), {"s": scope, "at": now_ms()}
        )
        paused_at = conn.execute(sql("SELECT paused_at FROM input_pause WHERE scope = :s"), {"s": scope}).scalar_one()
    return PauseState(scope=scope, paused_at=paused_at)


def input_pauses(store: DeliveryStore) -> list[PauseState]:
    """The pauses in force: the host's ("*") or accounts' (never both)."""
    with store.read() as conn:
        rows = conn.execute(
            sql(
                "SELECT scope, paused_at, EXISTS (SELECT 1 FROM account_placement WHERE account_id = scope"
                " AND state != 'active') AS by_move FROM input_pause ORDER BY scope"
            )
        ).mappings()
        return [PauseState.model_validate(dict(row)) for row in rows]


def resume_input(store: DeliveryStore, account_id: str | None = None) -> list[dict[str, Any]]:
    """Lift the pause (idempotent). Returns the pages it held in its scope, oldest first, to be
    ingested again; the input it kept from admission waits as pending (runtime.pipeline.resume).

    A move's pause is the move's to lift: pages taken in on the source after its slice left
    would be deleted with the account when the move completes (KEFU_INPUT_PAUSE_HELD_BY_MOVE)."""
    with store.write() as conn:
        placement = local_placement(conn, account_id) if account_id is not None else None
        if placement is not None and placement.state != PlacementState.ACTIVE:
            raise KefuError(
                "KEFU_INPUT_PAUSE_HELD_BY_MOVE",
                f"account {account_id!r} is {placement.state} (a move between shards); its input pause is the move's",
                "let the move finish or roll it back (`kefu accounts move`); that resumes input",
            )
        conn.execute(sql("DELETE FROM input_pause WHERE scope = :s"), {"s": _scope(account_id)})
    return held_pages(store, account_id)


def held_pages(store: DeliveryStore, account_id: str | None = None) -> list[dict[str, Any]]:
    with store.read() as conn:
        rows = conn.execute(
            sql("SELECT page FROM held_page WHERE :a IS NULL OR account_id = :a ORDER BY held_at"), {"a": account_id}
        ).scalars()
        return [json.loads(page) for page in rows]


def hold_page(store: DeliveryStore, page: InboundPage) -> bool:
    """Keep the page for the resume, if input is still paused; False when a resume came between
    the ingestion that saw the pause and now, so the page is to be ingested at once (a page held
    after the resume collected the held ones would wait for the reconciler). A held page is also
    a received page not yet ingested (one published without being recorded is recorded now), so
    nothing of it lives only in the broker."""
    record_received(store, page)
    with store.write() as conn:
        if not is_paused(conn, page.account_id):
            return False
        page = without_erased(conn.dbapi, page)
        conn.execute(
            sql(
                "INSERT OR IGNORE INTO held_page (account_id, stream_id, page_op_id, page, held_at)"
                " VALUES (:a, :s, :p, :page, :at)"
            ),
            {
                "a": page.account_id,
                "s": page.stream_id,
                "p": page.page_op_id,
                "page": page.model_dump_json(),
                "at": now_ms(),
            },
        )
    return True


def release_held(db: sqlite3.Connection, page: InboundPage) -> None:
    """The page is ingested: it is no longer held (runs in the cursor's transaction)."""
    db.execute(
        "DELETE FROM held_page WHERE account_id = ? AND stream_id = ? AND page_op_id = ?",
        (page.account_id, page.stream_id, page.page_op_id),
    )


def in_flight(store: DeliveryStore, account_id: str | None = None) -> int:
    """Pages caught midway and not yet held, plus admitted batches whose turn has not ended."""
    with store.read() as conn:
        return count_in_flight(conn, account_id)


def count_in_flight(conn: Connection, account_id: str | None) -> int:
    count: int = conn.execute(
        sql(
            "SELECT (SELECT count(DISTINCT g.page_op_id) FROM group_receipt g"
            "  WHERE (:a IS NULL OR g.account_id = :a)"
            "  AND NOT EXISTS (SELECT 1 FROM page_receipt p WHERE p.account_id = g.account_id"
            "   AND p.stream_id = g.stream_id AND p.page_op_id = g.page_op_id)"
            "  AND NOT EXISTS (SELECT 1 FROM held_page h WHERE h.account_id = g.account_id"
            "   AND h.stream_id = g.stream_id AND h.page_op_id = g.page_op_id))"
            " + (SELECT count(*) FROM admission_batch b JOIN customer c ON c.id = b.customer_id"
            "  WHERE (:a IS NULL OR c.account_id = :a) AND b.state IN ('claimed', 'committed'))"
        ),
        {"a": account_id},
    ).scalar_one()
    return count
