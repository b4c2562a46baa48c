"""The shard fence inside SQLite: every row a guarded connection writes is checked against the
store's fence by SQLite itself, in the statement that writes it.

A guarded store (runtime.placement.shards) must take writes only under the newest grant of its shard's
lease. Reading the fence at the start of every write transaction did that at the cost of one
statement per transaction, most of a buyer message's fencing. Instead each guarded connection
carries TEMP triggers on every table: a row written while the store's fence names another grant
than the one the connection last proved aborts its statement with `REFUSED`, which the store
turns into `ShardLeaseLost` (and the guard into "lost", for the whole process). The connection
proves a grant once, with the read (and the first write's claim) in `ShardGuard.check`, and its
triggers are then made again with that grant's token written into them (one lookup per row
written; a token held in a table would take two); until then they hold token 0, which no fence
holds, so nothing slips through before the proof. TEMP objects live in the connection alone:
other processes' files and schemas are untouched, and a rolled-back proof takes its triggers
with it.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from runtime.errors import KefuError
from runtime.store.migrate import ORDINARY_TABLES

REFUSED = "KEFU_SHARD_FENCE_REFUSED"
UNFENCED = ("shard_fence", "shard_grant")  # the fence itself: written by the claim that proves a grant
# A page's messages: a trigger per row costs about a fifth of ingest. Every transaction that
# inserts or updates them also writes a fenced row (the page's receipt, the batch, the customer,
# the lease, the request: tests/unit/test_shard_fence.py checks it on the pipeline's paths),
# and a refusal anywhere in a transaction rolls all of it back.
UNFENCED_WRITES = {("INSERT", "inbound_message"), ("UPDATE", "inbound_message")}

_KINDS = ("INSERT", "UPDATE", "DELETE")


class ShardLeaseLost(KefuError):
    def __init__(self, shard: str, why: str) -> None:
        super().__init__(
            "KEFU_SHARD_LEASE_LOST",
            f"this process no longer holds shard {shard!r}'s lease ({why}); it wrote nothing after that",
            "nothing to do: the holder of the new grant serves the shard; this process stops",
        )


def install(db: sqlite3.Connection) -> None:
    """Triggers for every table and kind of write, under token 0 (no grant proved yet)."""
    db.kefu_fence_tables = [  # type: ignore[attr-defined]
        name for (name,) in db.execute(ORDINARY_TABLES) if name not in UNFENCED
    ]
    _create(db.execute, db.kefu_fence_tables, 0)  # type: ignore[attr-defined]


def prove(db: sqlite3.Connection, token: int) -> None:
    """Inside the write transaction that read the fence and found (or made) it ours: rows this
    connection writes from now on are checked against `token`. Rolled back with the transaction."""
    tables: list[str] = getattr(db, "kefu_fence_tables", [])
    for table, kind in _fenced(tables):
        db.execute(f'DROP TRIGGER IF EXISTS temp."{_name(kind, table)}"')
    _create(db.execute, tables, token)


def _name(kind: str, table: str) -> str:
    return f"kefu_fence_{kind.lower()}_{table}"


def _fenced(tables: list[str]) -> list[tuple[str, str]]:
    return [(table, kind) for table in tables for kind in _KINDS if (kind, table) not in UNFENCED_WRITES]


def _create(execute: Any, tables: list[str], token: int) -> None:
    for table, kind in _fenced(tables):
        execute(
            f'CREATE TEMP TRIGGER "{_name(kind, table)}" BEFORE {kind} ON main."{table}"'
            f" WHEN (SELECT token FROM main.shard_fence WHERE id = 1) IS NOT {int(token)}"
            f" BEGIN SELECT RAISE(ABORT, '{REFUSED}'); END"
        )


def refused(error: BaseException) -> bool:
    """The error is a fence trigger's refusal (sqlite3's, or SQLAlchemy's wrapping of it)."""
    orig = getattr(error, "orig", error)
    return isinstance(orig, sqlite3.IntegrityError) and REFUSED in str(orig)


def lost(db: sqlite3.Connection) -> ShardLeaseLost:
    """What a refused write raises: the grant passed on, and the whole process is told so."""
    guard = getattr(db, "kefu_guard", None)
    if guard is None:  # only a guarded connection has the triggers
        return ShardLeaseLost("?", "the store's fence names another grant")
    guard.lose()
    return ShardLeaseLost(guard.shard, "the store has seen a newer grant than this one")
