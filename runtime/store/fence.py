"""The shard fence inside SQLite: every row a guarded connection writes is checked against the
store's fence by SQLite itself, in the statement that writes it.

A guarded store (runtime.shards) must take writes only under the newest grant of its shard's
lease. Reading the fence at the start of every write transaction did that at the cost of one
statement per transaction, most of a buyer message's fencing. Instead each guarded connection
carries TEMP triggers on every table: a row written while the store's fence names another grant
than the one the connection last proved aborts its statement with `REFUSED`, which the store
turns into `ShardLeaseLost` (and the guard into "lost", for the whole process). The connection
proves a grant once, with the read (and the first write's claim) in `ShardGuard.check`; until
then its proved token is 0, which no fence holds, so nothing slips through before the proof.
TEMP objects live in the connection alone: other processes' files and schemas are untouched.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from runtime.errors import KefuError

REFUSED = "KEFU_SHARD_FENCE_REFUSED"
UNFENCED = ("shard_fence", "shard_grant")  # the fence itself: written by the claim that proves a grant

_PROVE = "UPDATE temp.kefu_fence SET token = ? WHERE id = 1"


class ShardLeaseLost(KefuError):
    def __init__(self, shard: str, why: str) -> None:
        super().__init__(
            "KEFU_SHARD_LEASE_LOST",
            f"this process no longer holds shard {shard!r}'s lease ({why}); it wrote nothing after that",
            "nothing to do: the holder of the new grant serves the shard; this process stops",
        )


def install(db: sqlite3.Connection) -> None:
    """The connection's proved token (none yet) and a trigger per table and kind of write."""
    tables = [
        name
        for (name,) in db.execute(
            "SELECT name FROM main.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
        if name not in UNFENCED
    ]
    held = (
        "WHEN (SELECT token FROM main.shard_fence WHERE id = 1) IS NOT (SELECT token FROM temp.kefu_fence WHERE id = 1)"
    )
    script = [
        "CREATE TEMP TABLE kefu_fence (id INTEGER PRIMARY KEY, token INTEGER NOT NULL)",
        "INSERT INTO temp.kefu_fence VALUES (1, 0)",
        *(
            f'CREATE TEMP TRIGGER "kefu_fence_{kind.lower()}_{table}" BEFORE {kind} ON main."{table}" {held}'
            f" BEGIN SELECT RAISE(ABORT, '{REFUSED}'); END"
            for table in tables
            for kind in ("INSERT", "UPDATE", "DELETE")
        ),
    ]
    db.executescript(";\n".join(script) + ";")


def prove(execute: Any, token: int) -> None:
    """Inside the write transaction that read the fence and found (or made) it ours: rows this
    connection writes from now on are checked against `token`. Rolled back with the transaction."""
    execute(_PROVE, (token,))


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
