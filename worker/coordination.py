"""What every host of a kefu deployment shares besides the broker: the shard leases, the
account directory and the move journal (SPEC 3.12).

With a Redis broker they live in the same Redis, under `kefu:` keys; with the embedded broker
(one machine) in a small SQLite file in the data dir, with the same semantics. Either way they
only coordinate: each shard's SQLite store stays the record of its accounts.

Keys in Redis:
    kefu:shards                       set of shard names that were ever granted
    kefu:shard:<S>:lease              hash owner, token, granted_at; expires with the lease
    kefu:shard:<S>:tokens             counter: every new grant takes the next fencing token (raised
                                      first to the floor the asker read from the shard's store)
    kefu:shard:<S>:standby            sorted set: waiting owners, scored by when they lapse
    kefu:shard:<S>:members            sorted set: "<owner>/<process>" of the holder, likewise
    kefu:directory                    hash account id -> placement JSON
    kefu:move:<op>                    a move's journal record (JSON)
    kefu:move:<op>:<blob>             a move's exported slice, its credential (expires)
    kefu:moves:open                   set of op ids of moves not finished (done or rolled back):
                                      what beat drives on every shard (cheap when empty)
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import redis

from config import Settings
from runtime.placement.shards import Placement
from runtime.ports import Coordination
from runtime.store.connection import Connection, connect
from runtime.store.engine import immediate
from runtime.store.migrate import Migration, migrate


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Grant:
    token: int  # the fencing token: it grows with every new grant of the shard's lease
    new: bool  # False: a renewal of this owner's grant (by this process or another of its instance)


@dataclass(frozen=True)
class LeaseHolder:
    owner: str
    token: int
    expires_in_ms: int


class Coordinator(Coordination, Protocol):
    """The directory and journal (runtime.ports.Coordination), and the shard leases."""

    def grant(self, shard: str, owner: str, ttl_ms: int, member: str = "", floor: int = 0) -> Grant | None:
        """Take the lease, or renew it when `owner` holds it. None while another owner holds it.
        `member` names the process of the owner asking: it counts as alive for `ttl_ms`.

        `floor` is the newest grant the asker knows the shard's store has seen. The counter is
        the coordinator's memory, which Redis may lose (no persistence, failover to an empty
        replica): a new grant is always above the floor, and an owner's grant below it (issued
        after such a loss) is replaced by a new one, since the store refuses it anyway."""

    def release(self, shard: str, owner: str, member: str = "") -> None:
        """This member is done; the lease goes once no other member of the owner is alive."""

    def holder(self, shard: str) -> LeaseHolder | None: ...

    def announce_standby(self, shard: str, owner: str, ttl_ms: int) -> None: ...

    def standbys(self, shard: str) -> list[str]: ...

    def shards(self) -> list[str]: ...

    def placements(self) -> list[Placement]: ...


def _entry(placement: Placement | None) -> str | None:
    return None if placement is None else placement.model_dump_json()


# --- Redis --------------------------------------------------------------------------------

_GRANT = """
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner and owner ~= ARGV[1] then return false end
redis.call('ZADD', KEYS[4], ARGV[3] + ARGV[2], ARGV[1] .. '/' .. ARGV[5])
local floor = tonumber(ARGV[6])
if owner then
  local held = tonumber(redis.call('HGET', KEYS[1], 'token'))
  if held >= floor then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {held, 0}
  end
end
if tonumber(redis.call('GET', KEYS[2]) or '0') < floor then redis.call('SET', KEYS[2], floor) end
local token = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token, 'granted_at', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SADD', KEYS[3], ARGV[4])
return {token, 1}
"""
_RELEASE = """
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1] .. '/' .. ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], 0, ARGV[3])
for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  if string.sub(member, 1, #ARGV[1] + 1) == ARGV[1] .. '/' then return 0 end
end
return redis.call('DEL', KEYS[1])
"""
_PLACE = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if (current or '') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"""


class RedisCoordinator:
    def __init__(self, url: str) -> None:
        # redis-py types every reply as a union of all it could be: Any, and replies parsed here.
        self._redis: Any = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self._grant = self._redis.register_script(_GRANT)
        self._release = self._redis.register_script(_RELEASE)
        self._place = self._redis.register_script(_PLACE)

    @staticmethod
    def _key(shard: str, what: str) -> str:
        return f"kefu:shard:{shard}:{what}"

    def grant(self, shard: str, owner: str, ttl_ms: int, member: str = "", floor: int = 0) -> Grant | None:
        keys = [self._key(shard, "lease"), self._key(shard, "tokens"), "kefu:shards", self._key(shard, "members")]
        reply = self._grant(keys=keys, args=[owner, ttl_ms, _now_ms(), shard, member, floor])
        return None if reply is None else Grant(int(reply[0]), bool(reply[1]))

    def release(self, shard: str, owner: str, member: str = "") -> None:
        keys = [self._key(shard, "lease"), self._key(shard, "members")]
        self._release(keys=keys, args=[owner, member, _now_ms()])

    def holder(self, shard: str) -> LeaseHolder | None:
        with self._redis.pipeline() as pipe:
            lease, ttl = pipe.hgetall(self._key(shard, "lease")).pttl(self._key(shard, "lease")).execute()
        if not lease:
            return None
        return LeaseHolder(lease[b"owner"].decode(), int(lease[b"token"]), max(int(ttl), 0))

    def announce_standby(self, shard: str, owner: str, ttl_ms: int) -> None:
        key = self._key(shard, "standby")
        now = _now_ms()
        with self._redis.pipeline() as pipe:
            pipe.zadd(key, {owner: now + ttl_ms}).zremrangebyscore(key, 0, now).execute()

    def standbys(self, shard: str) -> list[str]:
        members = self._redis.zrangebyscore(self._key(shard, "standby"), _now_ms(), "+inf")
        return sorted(member.decode() for member in members)

    def shards(self) -> list[str]:
        return sorted(name.decode() for name in self._redis.smembers("kefu:shards"))

    def placement(self, account_id: str) -> Placement | None:
        raw = self._redis.hget("kefu:directory", account_id)
        return None if raw is None else Placement.model_validate_json(raw)

    def placements(self) -> list[Placement]:
        entries = self._redis.hgetall("kefu:directory")
        return sorted((Placement.model_validate_json(raw) for raw in entries.values()), key=lambda p: p.account_id)

    def place(self, placement: Placement, expected: Placement | None) -> bool:
        # Entries are compared as written: every writer serialises a Placement the same way.
        args = [placement.account_id, _entry(expected) or "", placement.model_dump_json()]
        return bool(self._place(keys=["kefu:directory"], args=args))

    def journal(self, op_id: str) -> dict[str, Any] | None:
        raw = self._redis.get(f"kefu:move:{op_id}")
        return None if raw is None else dict(json.loads(raw))

    def save_journal(self, op_id: str, record: dict[str, Any]) -> None:
        self._redis.set(f"kefu:move:{op_id}", json.dumps(record))

    def put_blob(self, key: str, data: bytes, ttl_s: int | None = None) -> None:
        self._redis.set(f"kefu:move:{key}", data, ex=ttl_s)

    def blob(self, key: str) -> bytes | None:
        raw = self._redis.get(f"kefu:move:{key}")
        return None if raw is None else bytes(raw)

    def drop_blob(self, key: str) -> None:
        self._redis.delete(f"kefu:move:{key}")

    # -- the journal's compare-and-set and its index of open moves (runtime.placement.moves) ----------
    def swap_journal(self, op_id: str, record: dict[str, Any], expected_version: int | None, is_open: bool) -> bool:
        script = self.__dict__.get("_swap") or self.__dict__.setdefault(
            "_swap", self._redis.register_script(_SWAP_JOURNAL)
        )
        args = [json.dumps(record), -1 if expected_version is None else expected_version, int(is_open), op_id]
        return bool(script(keys=[f"kefu:move:{op_id}", OPEN_MOVES], args=args))

    def open_moves(self) -> list[str]:
        return sorted(member.decode() for member in self._redis.smembers(OPEN_MOVES))


# --- one machine: a SQLite file -----------------------------------------------------------

# The file's schema (runtime.store.migrate). Version 1 is what the file held before it had
# versions (user_version 0, its tables made at every open): IF NOT EXISTS, so such a file
# takes the stamp and nothing else.
LOCAL_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "shard leases, the account directory and the move journal",
        (
            "CREATE TABLE IF NOT EXISTS lease (shard TEXT PRIMARY KEY, owner TEXT NOT NULL, token INTEGER NOT NULL,"
            " expires_at INTEGER NOT NULL)",
            "CREATE TABLE IF NOT EXISTS token (shard TEXT PRIMARY KEY, last INTEGER NOT NULL)",
            "CREATE TABLE IF NOT EXISTS standby (shard TEXT NOT NULL, owner TEXT NOT NULL, expires_at INTEGER NOT NULL,"
            " PRIMARY KEY (shard, owner))",
            "CREATE TABLE IF NOT EXISTS member (shard TEXT NOT NULL, owner TEXT NOT NULL, member TEXT NOT NULL,"
            " expires_at INTEGER NOT NULL, PRIMARY KEY (shard, owner, member))",
            "CREATE TABLE IF NOT EXISTS directory (account_id TEXT PRIMARY KEY, entry TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS journal (op_id TEXT PRIMARY KEY, record TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS blob (key TEXT PRIMARY KEY, data BLOB NOT NULL, expires_at INTEGER)",
            "CREATE TABLE IF NOT EXISTS open_move (op_id TEXT PRIMARY KEY)",  # the index of open moves
        ),
    ),
)
_BUSY_TIMEOUT_S = 10.0


class LocalCoordinator:
    """The same coordination in one file, for the embedded broker: every process of the
    machine's shards opens it, and SQLite's file lock makes each operation atomic."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = connect(path, _BUSY_TIMEOUT_S)
        try:
            migrate(conn, LOCAL_MIGRATIONS, f"{path} (the shards' coordination file)")
        finally:
            conn.close()

    @contextmanager
    def _db(self) -> Iterator[Connection]:
        """A connection per operation: never one open across a worker's forks."""
        with self._lock:
            conn = connect(self._path, _BUSY_TIMEOUT_S)
            try:
                with immediate(conn):
                    yield conn
            finally:
                conn.close()

    def grant(self, shard: str, owner: str, ttl_ms: int, member: str = "", floor: int = 0) -> Grant | None:
        now = _now_ms()
        with self._db() as db:
            row = db.execute(
                "SELECT owner, token FROM lease WHERE shard = ? AND expires_at > ?", (shard, now)
            ).fetchone()
            if row is not None and row[0] != owner:
                return None
            db.execute("INSERT OR REPLACE INTO member VALUES (?, ?, ?, ?)", (shard, owner, member, now + ttl_ms))
            if row is not None and int(row[1]) >= floor:
                db.execute("UPDATE lease SET expires_at = ? WHERE shard = ?", (now + ttl_ms, shard))
                return Grant(int(row[1]), new=False)
            db.execute(
                "INSERT INTO token (shard, last) VALUES (?, ? + 1)"
                " ON CONFLICT (shard) DO UPDATE SET last = max(last, excluded.last - 1) + 1",
                (shard, floor),
            )
            token = int(db.execute("SELECT last FROM token WHERE shard = ?", (shard,)).scalar_one())
            db.execute(
                "INSERT OR REPLACE INTO lease (shard, owner, token, expires_at) VALUES (?, ?, ?, ?)",
                (shard, owner, token, now + ttl_ms),
            )
            return Grant(token, new=True)

    def release(self, shard: str, owner: str, member: str = "") -> None:
        with self._db() as db:
            db.execute("DELETE FROM member WHERE shard = ? AND owner = ? AND member = ?", (shard, owner, member))
            others = db.execute(
                "SELECT 1 FROM member WHERE shard = ? AND owner = ? AND expires_at > ?", (shard, owner, _now_ms())
            ).fetchone()
            if others is None:
                db.execute("DELETE FROM lease WHERE shard = ? AND owner = ?", (shard, owner))

    def holder(self, shard: str) -> LeaseHolder | None:
        now = _now_ms()
        with self._db() as db:
            row = db.execute(
                "SELECT owner, token, expires_at FROM lease WHERE shard = ? AND expires_at > ?", (shard, now)
            ).fetchone()
        return None if row is None else LeaseHolder(row[0], int(row[1]), int(row[2]) - now)

    def announce_standby(self, shard: str, owner: str, ttl_ms: int) -> None:
        now = _now_ms()
        with self._db() as db:
            db.execute("INSERT OR REPLACE INTO standby VALUES (?, ?, ?)", (shard, owner, now + ttl_ms))
            db.execute("DELETE FROM standby WHERE expires_at <= ?", (now,))

    def standbys(self, shard: str) -> list[str]:
        with self._db() as db:
            rows = db.execute(
                "SELECT owner FROM standby WHERE shard = ? AND expires_at > ? ORDER BY owner", (shard, _now_ms())
            )
            return [row[0] for row in rows]

    def shards(self) -> list[str]:
        with self._db() as db:
            return [row[0] for row in db.execute("SELECT shard FROM token ORDER BY shard")]

    def placement(self, account_id: str) -> Placement | None:
        with self._db() as db:
            row = db.execute("SELECT entry FROM directory WHERE account_id = ?", (account_id,)).fetchone()
        return None if row is None else Placement.model_validate_json(row[0])

    def placements(self) -> list[Placement]:
        with self._db() as db:
            rows = db.execute("SELECT entry FROM directory ORDER BY account_id").fetchall()
        return [Placement.model_validate_json(row[0]) for row in rows]

    def place(self, placement: Placement, expected: Placement | None) -> bool:
        with self._db() as db:
            row = db.execute("SELECT entry FROM directory WHERE account_id = ?", (placement.account_id,)).fetchone()
            current = None if row is None else Placement.model_validate_json(row[0])
            if _entry(current) != _entry(expected):
                return False
            db.execute("INSERT OR REPLACE INTO directory VALUES (?, ?)", (placement.account_id, _entry(placement)))
            return True

    def journal(self, op_id: str) -> dict[str, Any] | None:
        with self._db() as db:
            row = db.execute("SELECT record FROM journal WHERE op_id = ?", (op_id,)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def save_journal(self, op_id: str, record: dict[str, Any]) -> None:
        with self._db() as db:
            db.execute("INSERT OR REPLACE INTO journal VALUES (?, ?)", (op_id, json.dumps(record)))

    def put_blob(self, key: str, data: bytes, ttl_s: int | None = None) -> None:
        expires = None if ttl_s is None else _now_ms() + ttl_s * 1000
        with self._db() as db:
            db.execute("INSERT OR REPLACE INTO blob VALUES (?, ?, ?)", (key, data, expires))

    def blob(self, key: str) -> bytes | None:
        with self._db() as db:
            row = db.execute(
                "SELECT data FROM blob WHERE key = ? AND (expires_at IS NULL OR expires_at > ?)", (key, _now_ms())
            ).fetchone()
        return None if row is None else bytes(row[0])

    def drop_blob(self, key: str) -> None:
        with self._db() as db:
            db.execute("DELETE FROM blob WHERE key = ?", (key,))

    # -- the journal's compare-and-set and its index of open moves (runtime.placement.moves) ----------
    def swap_journal(self, op_id: str, record: dict[str, Any], expected_version: int | None, is_open: bool) -> bool:
        with self._db() as db:
            row = db.execute("SELECT record FROM journal WHERE op_id = ?", (op_id,)).fetchone()
            version = None if row is None else int(json.loads(row[0]).get("version", 0))
            if version != expected_version:
                return False
            db.execute("INSERT OR REPLACE INTO journal VALUES (?, ?)", (op_id, json.dumps(record)))
            if is_open:
                db.execute("INSERT OR IGNORE INTO open_move VALUES (?)", (op_id,))
            else:
                db.execute("DELETE FROM open_move WHERE op_id = ?", (op_id,))
            return True

    def open_moves(self) -> list[str]:
        with self._db() as db:
            return [row[0] for row in db.execute("SELECT op_id FROM open_move ORDER BY op_id")]


# --- the journal's compare-and-set and the index of open moves -----------------------------

OPEN_MOVES = "kefu:moves:open"
# A journal record is replaced only over the version its writer read (-1: none yet), so two
# writers (a shard's step, the other shard's bound, the mover) never overwrite each other's
# step; the set of open moves changes in the same atomic step.
_SWAP_JOURNAL = """
local current = redis.call('GET', KEYS[1])
local version = -1
if current then version = tonumber(cjson.decode(current)['version'] or 0) end
if version ~= tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
if ARGV[3] == '1' then redis.call('SADD', KEYS[2], ARGV[4]) else redis.call('SREM', KEYS[2], ARGV[4]) end
return 1
"""


def coordinator_for(settings: Settings) -> Coordinator:
    """Redis when the broker is Redis (every host sees it); else the data dir's file (one
    machine: the embedded broker, or an AMQP broker on a single host)."""
    if settings.redis_broker:
        return RedisCoordinator(settings.broker_url)
    return LocalCoordinator(settings.data_dir / "coordination.sqlite")
