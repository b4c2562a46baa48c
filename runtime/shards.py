"""Shards (SPEC 3.12): one holder writes a shard's store at a time, and every account lives on
exactly one shard.

The shard lease itself lives where every host can see it (Redis, or a local file with the
embedded broker: worker.coordination); this module is what the store needs of it. A holder's
`ShardGuard` carries its grant's fencing token and a local deadline. Every write of a guarded
store is checked against both: the token against the one the store last saw, by SQLite on
each row written (runtime.store.fence; a newer grant there means ours passed on), the
deadline against the monotonic clock at each write transaction's start (runtime.store.engine)
(a lease not renewed in time is treated as lost before it can expire in Redis, so a holder cut
off from Redis stops writing before anyone else may start). A guard lives in shared memory, so
a worker's prefork children see what its main process renews.
"""

from __future__ import annotations

import mmap
import struct
import time
import zlib
from typing import Any

from pydantic import BaseModel

from runtime.errors import KefuError
from runtime.states import PlacementState
from runtime.store.connection import Connection
from runtime.store.fence import ShardLeaseLost as ShardLeaseLost  # raised by the store; part of the shard API
from runtime.store.sql import sql

_CELL = struct.Struct("<qq")  # token, deadline (CLOCK_MONOTONIC ns); 0 deadline: lost
ID_RANGE = 1_000_000_000  # customer ids a shard allocates: kept as they are when an account moves


def customer_id_base(shard: str) -> int:
    """Where the shard's customer ids start. Customer ids name sessions, memory scopes and (by
    hash) automatic request ids, so a moved account keeps its ids, and shards must not share
    ranges: `default` has the first (the ids kefu always gave), every other name one of 8,999
    more by hash (a move refuses the rare account whose ids collide)."""
    return 0 if shard == "default" else (zlib.crc32(shard.encode()) % 8999 + 1) * ID_RANGE


class ShardHeldElsewhere(KefuError):
    def __init__(self, shard: str, owner: str) -> None:
        super().__init__(
            "KEFU_SHARD_HELD_ELSEWHERE",
            f"shard {shard!r} is served by instance {owner!r}; this one may not write its store",
            "run the command on that instance's host, or stop it first (its lease lapses)",
        )


class ShardGuard:
    """One grant of a shard's lease as this process (and its forked children) sees it."""

    def __init__(self, shard: str, owner: str) -> None:
        self.shard = shard
        self.owner = owner
        self._cell = mmap.mmap(-1, _CELL.size)  # anonymous and shared: children see renewals

    def _read(self) -> tuple[int, int]:
        token, deadline = _CELL.unpack(self._cell[:])
        return int(token), int(deadline)

    @property
    def token(self) -> int:
        return self._read()[0]

    @property
    def deadline_ns(self) -> int:
        return self._read()[1]

    def hold(self, token: int, deadline_ns: int) -> None:
        self._cell[:] = _CELL.pack(token, deadline_ns)

    def lose(self) -> None:
        token, _ = self._read()
        self._cell[:] = _CELL.pack(token, 0)

    @property
    def lost(self) -> bool:
        return self._read()[1] == 0

    def require(self) -> int:
        """The token, while the lease is ours by the local clock; else ShardLeaseLost."""
        token, deadline = self._read()
        if deadline == 0:
            raise ShardLeaseLost(self.shard, "it was lost")
        if time.monotonic_ns() >= deadline:
            raise ShardLeaseLost(self.shard, "it was not renewed in time")
        return token

    def confirm(self, execute: Any) -> tuple[int, int]:
        """The lease is ours by the local clock and the store has seen no newer grant; returns
        (our token, the store's). `execute(sql, params)` runs on the caller's transaction."""
        token = self.require()
        row = execute(_FENCE, {}).fetchone()
        stored = int(row[0]) if row is not None else 0
        if stored > token:
            self.lose()
            raise ShardLeaseLost(self.shard, f"the store has seen grant {stored}, newer than this one")
        return token, stored

    def check(self, execute: Any) -> bool:
        """Inside a write transaction: the store's fence is still ours. A store that saw only
        older grants takes ours now (the first write of a new grant claims the store); one that
        saw a newer grant means ours passed on. True when this transaction claims the store from
        another instance: once its connection proved the grant, `take_over` frees what that
        instance held (a new grant of the same instance frees nothing: its leases pass as ever)."""
        token, stored = self.confirm(execute)
        if stored == token:
            return False
        previous = execute(_FENCE_OWNER, {}).fetchone()
        at = time.time_ns() // 1_000_000
        execute(_CLAIM, {"t": token, "o": self.owner, "at": at})
        execute(_GRANTED, {"t": token, "o": self.owner, "at": at})
        return previous is not None and previous[0] != self.owner  # another instance held it

    def take_over(self, execute: Any) -> int:
        """In the transaction that claims the store for a new grant, after its connection proved
        it: every store lease still unexpired (listeners, customer writers, moves, alerts) was
        granted under an earlier grant, whose processes can write nothing from now on (the
        fence refuses them, and a holder's renewal is a write). Waiting for those leases to
        expire would only keep the new holder from the shard's work, the listener's for
        KEFU_LISTENER__LEASE_S and a turn's for KEFU_AGENT__TURN_LEASE_S, long after the shard
        lease passed; so they are let go here, all at once. Their rows stay, so the next grant
        of each still gets a higher token. Returns how many were let go."""
        return int(execute(_RELEASE_EARLIER, {"now": time.time_ns() // 1_000_000}).rowcount)


_FENCE = "SELECT token FROM shard_fence WHERE id = 1"
_FENCE_OWNER = "SELECT owner FROM shard_fence WHERE id = 1"
_CLAIM = (
    "INSERT INTO shard_fence (id, token, owner, granted_at) VALUES (1, :t, :o, :at)"
    " ON CONFLICT (id) DO UPDATE SET token = excluded.token, owner = excluded.owner, granted_at = excluded.granted_at"
)
# Every lease in the store when a new grant claims it was taken under an earlier grant. Lapsed
# (1), not released (0), as runtime.leases marks a holder that never gave its lease back: the
# rescue beat runs the open batches of those turns at once (runtime.admission.stranded_batches).
_RELEASE_EARLIER = "UPDATE lease SET expires_at = 1 WHERE expires_at >= :now"
_GRANTED = "INSERT OR IGNORE INTO shard_grant (token, owner, granted_at) VALUES (:t, :o, :at)"


class Placement(BaseModel):
    """Where an account lives: the directory's entry. `generation` grows with every move."""

    account_id: str
    shard: str
    generation: int = 1
    state: PlacementState = PlacementState.ACTIVE
    move: str | None = None  # in the directory, while moving: the op id of the move that holds it


def local_placement(conn: Connection, account_id: str) -> Placement | None:
    """This shard's copy of the account's directory entry."""
    row = (
        conn.execute(
            sql("SELECT account_id, shard, generation, state FROM account_placement WHERE account_id = :a"),
            {"a": account_id},
        )
        .mappings()
        .first()
    )
    return None if row is None else Placement.model_validate(row)


def record_placement(conn: Connection, placement: Placement) -> None:
    conn.execute(
        sql(
            "INSERT INTO account_placement (account_id, shard, generation, state, updated_at)"
            " VALUES (:a, :s, :g, :st, :at) ON CONFLICT (account_id) DO UPDATE SET shard = excluded.shard,"
            " generation = excluded.generation, state = excluded.state, updated_at = excluded.updated_at"
        ),
        {
            "a": placement.account_id,
            "s": placement.shard,
            "g": placement.generation,
            "st": placement.state,
            "at": time.time_ns() // 1_000_000,
        },
    )
