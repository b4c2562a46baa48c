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

import logging
import mmap
import struct
import time
import zlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from sqlalchemy.exc import DBAPIError

from runtime.errors import KefuError
from runtime.store import queries
from runtime.store.clock import now_ms
from runtime.store.connection import Connection, connect
from runtime.store.fence import ShardLeaseLost as ShardLeaseLost  # raised by the store; part of the shard API
from runtime.store.states import PlacementState

log = logging.getLogger(__name__)

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

    def confirm(self, execute: Any) -> tuple[int, int, str | None]:
        """The lease is ours by the local clock and the store has seen no newer grant; returns
        (our token, the store's, the instance that claimed the store's). `execute(sql, params)`
        runs on the caller's transaction. A grant is its token and its instance together: the
        store's own token under another instance means the grant counter started again below
        what this instance was granted (Redis lost its data before this grant's first write),
        so two instances hold one token, and the one that claimed the store keeps it."""
        token = self.require()
        row = execute(queries.shard_fence.CURRENT, {}).fetchone()
        stored, owner = (int(row[0]), str(row[1])) if row is not None else (0, None)
        if stored > token:
            self.lose()
            raise ShardLeaseLost(self.shard, f"the store has seen grant {stored}, newer than this one")
        if stored == token and owner is not None and owner != self.owner:
            self.lose()
            raise ShardLeaseLost(self.shard, f"the store's grant {stored} is instance {owner!r}'s")
        return token, stored, owner

    def check(self, execute: Any) -> bool:
        """Inside a write transaction: the store's fence is still ours. A store that saw only
        older grants takes ours now (the first write of a new grant claims the store); one that
        saw a newer grant means ours passed on. True when this transaction claims the store from
        another instance: once its connection proved the grant, `take_over` frees what that
        instance held (a new grant of the same instance frees nothing: its leases pass as ever)."""
        token, stored, previous = self.confirm(execute)
        if stored == token:
            return False
        at = now_ms()
        execute(queries.shard_fence.CLAIM, {"t": token, "o": self.owner, "at": at})
        execute(queries.shard_grant.RECORD, {"t": token, "o": self.owner, "at": at})
        return previous is not None and previous != self.owner  # another instance held it

    def take_over(self, execute: Any) -> int:
        """In the transaction that claims the store for a new grant, after its connection proved
        it: every store lease still unexpired (listeners, customer writers, moves, alerts) was
        granted under an earlier grant, whose processes can write nothing from now on (the
        fence refuses them, and a holder's renewal is a write). Waiting for those leases to
        expire would only keep the new holder from the shard's work, the listener's for
        KEFU_LISTENER__LEASE_S and a turn's for KEFU_AGENT__TURN_LEASE_S, long after the shard
        lease passed; so they are let go here, all at once. Their rows stay, so the next grant
        of each still gets a higher token. Returns how many were let go."""
        return int(execute(queries.lease.RELEASE_EARLIER, {"now": now_ms()}).rowcount)


def newest_grant(path: Path) -> int:
    """The newest grant the shard's store has seen (0: no store yet, or no grant ever), read
    without writing anything: the floor of this process's grant. A store that cannot be read
    now gives 0; should its fence be newer, the first write is refused and the next start
    reads it again."""
    if not path.exists():
        return 0
    try:
        db = connect(path, read_only=True)
    except DBAPIError as error:
        log.warning("the store's fence cannot be read (%s); asking for the lease without a floor", error.orig)
        return 0
    try:
        found = db.execute(queries.shard_fence.NEWEST_TOKEN).scalar()
        return int(found) if found is not None else 0
    except DBAPIError as error:  # an old store without the fence tables, or a damaged one
        if "no such table" not in str(error.orig):
            log.warning("the store's fence cannot be read (%s); asking for the lease without a floor", error.orig)
        return 0
    finally:
        db.close()


class Placement(BaseModel):
    """Where an account lives: the directory's entry. `generation` grows with every move."""

    account_id: str
    shard: str
    generation: int = 1
    state: PlacementState = PlacementState.ACTIVE
    move: str | None = None  # in the directory, while moving: the op id of the move that holds it


def local_placement(conn: Connection, account_id: str) -> Placement | None:
    """This shard's copy of the account's directory entry."""
    row = conn.execute(queries.account_placement.BY_ACCOUNT, {"a": account_id}).mappings().first()
    return None if row is None else Placement.model_validate(row)


def record_placement(conn: Connection, placement: Placement) -> None:
    conn.execute(
        queries.account_placement.RECORD,
        {
            "a": placement.account_id,
            "s": placement.shard,
            "g": placement.generation,
            "st": placement.state,
            "at": now_ms(),
        },
    )
