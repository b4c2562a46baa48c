"""Input pause (SPEC 3.11): stop taking in new pages, for one account or the whole host, e.g.
to upgrade safely, without losing any.

While paused, a page is held instead of persisted: ingestion checks the pause inside the
page's transaction, so the page is held whole and its cursor stays. Admission stops too.
Turns already admitted finish, and `in_flight` says what is still on its way. Resuming returns
the held pages for publishing again; a held page leaves the table once it is ingested.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from runtime.accounts.registry import require_account
from runtime.customers.erasure import without_erased
from runtime.errors import KefuError
from runtime.inbound.inbox import record_received
from runtime.inbound.pages import InboundPage
from runtime.placement.shards import local_placement
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection
from runtime.store.states import PlacementState

HOST = "*"


class InputPaused(Exception):
    """Raised inside ingestion when input is paused: the page is to be held, not persisted."""


class PauseState(BaseModel):
    scope: str  # "*" for the host, else the account id
    paused_at: int
    by_move: bool = False  # the account is between shards: only the move resumes it


def _scope(account_id: str | None) -> str:
    return HOST if account_id is None else account_id


def is_paused(conn: Connection, account_id: str) -> bool:
    return conn.execute(queries.input_pause.FOR_ACCOUNT, {"a": account_id}).first() is not None


def held_unless_paused(account_id: str, input_paused: bool, page_held: bool) -> bool:
    """For ingestion's transaction, from the columns the page's account is read with
    (runtime.store.queries.input_pause.PAUSED_OR_HELD_COLUMNS): raises InputPaused while input
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
        other = conn.execute(queries.input_pause.CONFLICTING, {"s": scope}).scalar_one_or_none()
        if other is not None:
            held_by = "the host" if other == HOST else f"account {other!r}"
            raise KefuError(
                "KEFU_INPUT_PAUSE_CONFLICT",
                f"input is already paused for {held_by}; a host pause and an account pause do not mix",
                "resume that pause first",
            )
        conn.execute(queries.input_pause.PAUSE, {"s": scope, "at": now_ms()})
        paused_at = conn.execute(queries.input_pause.PAUSED_AT, {"s": scope}).scalar_one()
    return PauseState(scope=scope, paused_at=paused_at)


def input_pauses(store: DeliveryStore) -> list[PauseState]:
    """The pauses in force: the host's ("*") or accounts' (never both)."""
    with store.read() as conn:
        rows = conn.execute(queries.input_pause.IN_FORCE).mappings()
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
        conn.execute(queries.input_pause.LIFT, {"s": _scope(account_id)})
    return held_pages(store, account_id)


def held_pages(store: DeliveryStore, account_id: str | None = None) -> list[dict[str, Any]]:
    with store.read() as conn:
        rows = conn.execute(queries.held_page.PAGES, {"a": account_id}).scalars()
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
        page = without_erased(conn, page)
        conn.execute(
            queries.held_page.HOLD,
            {
                "a": page.account_id,
                "s": page.stream_id,
                "p": page.page_op_id,
                "page": page.model_dump_json(),
                "at": now_ms(),
            },
        )
    return True


def release_held(db: Connection, page: InboundPage) -> None:
    """The page is ingested: it is no longer held (runs in the cursor's transaction)."""
    db.execute(queries.held_page.RELEASE, (page.account_id, page.stream_id, page.page_op_id))


def in_flight(store: DeliveryStore, account_id: str | None = None) -> int:
    """Pages caught midway and not yet held, plus admitted batches whose turn has not ended."""
    with store.read() as conn:
        return count_in_flight(conn, account_id)


def count_in_flight(conn: Connection, account_id: str | None) -> int:
    count: int = conn.execute(queries.group_receipt.IN_FLIGHT, {"a": account_id}).scalar_one()
    return count
