"""Open a delivery SQLite file: PRAGMAs set and read back, migrations applied, transactions."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import DatabaseError, OperationalError

from config import DeliverySettings
from config.retries import STORE_MIGRATION_BUSY, STORE_WRITE_BUSY
from runtime.errors import KefuError
from runtime.store import fence
from runtime.store.connection import Connection, as_sqlalchemy_error, require_sqlite
from runtime.store.failures import is_busy, store_error, unopenable
from runtime.store.migrate import migrate, user_version
from runtime.store.migrations import MIGRATIONS

if TYPE_CHECKING:
    from runtime.placement.shards import ShardGuard

log = logging.getLogger(__name__)


class _Connection(sqlite3.Connection):
    """A store's DBAPI connection, which knows its shard guard (set once the store is migrated)
    so `immediate()` can check it, and whether its commits are on disk on their own."""

    kefu_guard: ShardGuard | None = None
    kefu_path: Path | None = None  # the store's file: what readers key their in-process caches on
    kefu_proved = 0  # the grant whose fence this connection's triggers check (runtime.store.fence)
    kefu_proving = 0  # the grant the open transaction proved: `kefu_proved` once it commits
    kefu_synchronous = "FULL"  # NORMAL in WAL mode: a commit is on disk at the next FULL one or checkpoint
    kefu_generation = 0  # the store's close() count when it was opened: an older one is closed
    kefu_busy_timeout_ms = 2000  # the store's busy timeout, as configured (`_begin_write` lifts it a moment)
    kefu_writers: threading.RLock | None = None  # the store's in-process queue of writers (`_begin_write`)
    kefu_writing = False  # this connection holds `kefu_writers` (its write transaction is open)


@contextmanager
def synchronous(db: sqlite3.Connection, durable: bool) -> Iterator[None]:
    """A durable transaction's COMMIT returns once it is on disk (PRAGMA synchronous = FULL,
    set before BEGIN, where SQLite applies it; in WAL mode it also makes every earlier commit
    durable). For the commits a platform call follows or records: a power loss must never
    roll back "attempt begun", or a recorded page the platform was told it may drop. The other
    commits keep WAL's NORMAL (consistent, durable at the next durable commit or checkpoint)."""
    base = getattr(db, "kefu_synchronous", "FULL")
    if not durable or base == "FULL":
        yield
        return
    db.execute("PRAGMA synchronous = FULL")
    try:
        yield
    finally:
        db.execute(f"PRAGMA synchronous = {base}")


WRITERS_WAIT_S = 60.0  # the longest a write waits for this process's writers ahead of it


def _begin_write(db: sqlite3.Connection) -> None:
    """BEGIN IMMEDIATE, after this process's other writers of the store (the store's writers
    lock, held until COMMIT or ROLLBACK: `_end_write`). Threads of one process (a thread pool
    of hundreds of turns) queue on that lock instead of polling SQLite's; it is re-entrant, so a
    transaction opened inside another on the same thread fails as SQLite would (busy) instead
    of waiting for itself. A writer waits there as long as the queue ahead of it takes, up to
    WRITERS_WAIT_S (a writer stuck that long is a fault, not a queue), never the busy timeout
    meant for another process's transaction.

    Between processes, SQLite's own busy handler sleeps 1, 2, 5, 10, 15, 20, 25 ms … between
    tries: worker processes whose write transactions last a fraction of a millisecond would
    spend their time in those sleeps, and latency would jump by tens of milliseconds as soon as
    two of them meet. So the lock is tried without SQLite's wait first, again after short sleeps
    (about 35 ms in all), and only then with the connection's whole busy timeout."""
    timeout_ms = getattr(db, "kefu_busy_timeout_ms", _Connection.kefu_busy_timeout_ms)
    writers: threading.RLock | None = getattr(db, "kefu_writers", None)
    if writers is not None:
        _wait_for_turn(writers, timeout_ms)
        db.kefu_writing = True  # type: ignore[attr-defined]
    try:
        _begin_immediate(db, timeout_ms)
    except BaseException:
        _end_write(db)
        raise


def _wait_for_turn(writers: threading.RLock, busy_timeout_ms: int) -> None:
    if not writers.acquire(timeout=max(WRITERS_WAIT_S, busy_timeout_ms / 1000)):
        raise sqlite3.OperationalError("database is locked (by this process's other writers)")


def _end_write(db: sqlite3.Connection) -> None:
    """The connection's write transaction is over (committed or rolled back): the next writer of
    this process goes. Harmless when it held no place in the queue."""
    if getattr(db, "kefu_writing", False) and not db.in_transaction:
        db.kefu_writing = False  # type: ignore[attr-defined]
        db.kefu_writers.release()  # type: ignore[attr-defined]


def _begin_immediate(db: sqlite3.Connection, timeout_ms: int) -> None:
    db.execute("PRAGMA busy_timeout = 0")
    try:
        for wait_s in STORE_WRITE_BUSY.waits_s():
            try:
                db.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as error:
                if not _is_busy(error):
                    raise
            time.sleep(wait_s)
    finally:
        db.execute(f"PRAGMA busy_timeout = {timeout_ms}")
    db.execute("BEGIN IMMEDIATE")


def _begin(db: sqlite3.Connection, write: bool) -> None:
    """BEGIN (IMMEDIATE for a write, `_begin_write`). A write on a guarded store's connection
    checks the shard lease's local deadline first, and is rolled back if it is refused. The
    store's fence is read (and claimed) only by the first write of a grant on the connection;
    after that, SQLite checks it on every row written (runtime.store.fence). The write that
    claims the store for a new grant also lets go of the leases earlier grants held
    (`ShardGuard.take_over`)."""
    if write:
        _begin_write(db)
    else:
        db.execute("BEGIN DEFERRED")
    guard = getattr(db, "kefu_guard", None) if write else None
    if guard is not None:
        try:
            token = guard.require()
            if token != getattr(db, "kefu_proved", 0):
                claims = guard.check(db.execute)
                fence.prove(db, token)
                db.kefu_proving = token  # type: ignore[attr-defined]
                if claims:  # a new grant: what the earlier grants' holders held is free now
                    released = guard.take_over(db.execute)
                    log.info(
                        "shard %s: grant %d claims the store; %d leases of earlier grants let go",
                        guard.shard,
                        token,
                        released,
                    )
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            _end_write(db)
            raise


def _commit(db: sqlite3.Connection) -> None:
    """COMMIT; a grant proved by the transaction is the connection's from now on."""
    proving = getattr(db, "kefu_proving", 0)  # 0 on any connection but a guarded store's
    if proving:
        db.kefu_proving = 0  # type: ignore[attr-defined]
    try:
        db.execute("COMMIT")
    finally:
        _end_write(db)  # (a COMMIT that failed leaves the transaction open: its ROLLBACK ends it)
    if proving:
        db.kefu_proved = proving  # type: ignore[attr-defined]


def _rollback(db: sqlite3.Connection, error: BaseException) -> BaseException | None:
    """ROLLBACK after `error` (SQLite may have rolled back already, e.g. on a full disk); what
    to raise instead of it: a fence trigger's refusal is the lease lost."""
    if getattr(db, "kefu_proving", 0):
        db.kefu_proving = 0  # type: ignore[attr-defined]
    if db.in_transaction:
        db.execute("ROLLBACK")
    _end_write(db)
    return fence.lost(db) if fence.refused(error) else None


@contextmanager
def immediate(conn: Connection, durable: bool = False) -> Iterator[Connection]:
    """BEGIN IMMEDIATE ... COMMIT on an autocommit connection (`_begin`); ROLLBACK on any
    error. `durable`: see `synchronous`."""
    db = conn.dbapi
    with synchronous(db, durable):
        try:
            _begin(db, write=True)
        except sqlite3.Error as error:
            raise as_sqlalchemy_error("BEGIN", error) from error
        try:
            yield conn
        except BaseException as error:
            instead = _rollback(db, error)
            if instead is not None:
                raise instead from None
            raise
        try:
            _commit(db)
        except sqlite3.Error as error:
            raise as_sqlalchemy_error("COMMIT", error) from error


def _is_busy(error: BaseException) -> bool:
    text = str(error).lower()
    return "database is locked" in text or "database is busy" in text


def _owner_only(path: Path) -> None:
    """The store holds credentials: only its owner may read it (SQLite gives its -wal and -shm
    files the database file's permissions). An existing file is never opened here: closing a
    descriptor drops every POSIX lock this process holds on the file, SQLite's included, so a
    second store on a file another store of this process has open would corrupt it."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600))  # new: no one holds a lock yet
    except FileExistsError:
        pass
    mode = path.stat().st_mode
    if mode & 0o077:
        os.chmod(path, mode & 0o700)


IDLE_KEPT = 64  # idle connections a store keeps open; one returned beyond them is closed


class DeliveryStore:
    """One shard's delivery state. All writes go through `write()` (BEGIN IMMEDIATE); with a
    `guard`, each of them holds only while this process holds the shard's lease.

    Connections stay open for the life of the store (a long-lived connection keeps SQLite's
    page cache and sqlite3's prepared statements) in one pool that every thread of the process
    draws on, the last one returned first: a thread pool of hundreds of turns opens as many
    connections as transactions run at once, not one per thread, and the connection just used,
    whose page cache is current, goes next. A transaction opened inside another one on the
    same thread takes a second connection. The process's writers queue on one lock before
    SQLite's (`_begin_write`)."""

    def __init__(
        self,
        path: Path,
        settings: DeliverySettings | None = None,
        guard: ShardGuard | None = None,
        customer_id_base: int = 0,
    ) -> None:
        """Open (create, migrate) the file. A damaged, foreign or unopenable file raises
        KEFU_DELIVERY_STORE_UNREADABLE naming it; a busy one stays a driver error to retry on.
        New customers get ids above `customer_id_base` (runtime.placement.shards.customer_id_base)."""
        self.path = Path(path).resolve()
        self.settings = settings or DeliverySettings()
        self.guard = guard
        self.customer_id_base = customer_id_base
        self._fenced = False  # migrations run before the fence's table exists
        self._idle: list[_Connection] = []  # the pool, most recently returned last
        self._writers = threading.RLock()
        # Every open connection, for close() and trace(); weakly, so one dropped from the pool
        # (beyond IDLE_KEPT) is closed when it is let go, not kept open here.
        self._opened: weakref.WeakSet[_Connection] = weakref.WeakSet()
        self._busy: set[_Connection] = set()  # those in a transaction now
        self._generation = 0  # +1 on each close()
        self._opened_lock = threading.Lock()
        self._pid = os.getpid()
        self._trace: Callable[[str], None] | None = None
        self._exclusive = threading.RLock() if self.settings.locking_mode == "EXCLUSIVE" else None
        try:
            self._open()
        except (sqlite3.DatabaseError, DatabaseError) as error:
            known = None if is_busy(error) else store_error(self.path, error)
            if known is None:
                raise
            raise known from None
        except OSError as error:
            raise unopenable(self.path, error) from None

    def _open(self) -> None:
        require_sqlite()  # before any file is made
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _owner_only(self.path)
        self._migrate()
        if self.guard is not None:
            self._fenced = True
            self.close()  # the connections opened to migrate: new ones are fenced

    # -- connections -------------------------------------------------------------------
    def _connect(self) -> _Connection:
        try:
            dbapi = sqlite3.connect(
                self.path,
                factory=_Connection,
                check_same_thread=False,
                timeout=self.settings.busy_timeout_ms / 1000,
                isolation_level=None,  # kefu issues BEGIN itself (`_begin`)
                cached_statements=256,
            )
        except sqlite3.Error as error:
            raise as_sqlalchemy_error("connect", error) from error
        try:
            self._configure(dbapi)
        except BaseException:
            dbapi.close()
            raise
        if self._trace is not None:
            dbapi.set_trace_callback(self._trace)
        with self._opened_lock:
            dbapi.kefu_generation = self._generation
            self._opened.add(dbapi)
        return dbapi

    def _configure(self, dbapi: _Connection) -> None:
        s = self.settings
        wanted: list[tuple[str, str, Any]] = [
            ("locking_mode", s.locking_mode, s.locking_mode.lower()),
            ("journal_mode", s.journal_mode, s.journal_mode.lower()),
            ("busy_timeout", str(s.busy_timeout_ms), s.busy_timeout_ms),
            ("synchronous", "NORMAL" if s.journal_mode == "WAL" else "FULL", 1 if s.journal_mode == "WAL" else 2),
            ("foreign_keys", "ON", 1),
        ]
        if self.guard is not None and self._fenced:
            dbapi.kefu_guard = self.guard
            wanted.append(("temp_store", "MEMORY", 2))  # the fence's triggers (runtime.store.fence)
        dbapi.kefu_synchronous = "NORMAL" if s.journal_mode == "WAL" else "FULL"
        dbapi.kefu_busy_timeout_ms = s.busy_timeout_ms
        dbapi.kefu_writers = self._writers
        dbapi.kefu_path = self.path
        if s.cache_size_kib is not None:
            wanted.append(("cache_size", str(-s.cache_size_kib), -s.cache_size_kib))
        for name, value, expected in wanted:
            try:
                actual = dbapi.execute(f"PRAGMA {name} = {value}").fetchone()
                if actual is None:
                    actual = dbapi.execute(f"PRAGMA {name}").fetchone()
            except sqlite3.Error as error:
                raise as_sqlalchemy_error(f"PRAGMA {name}", error) from error
            if actual[0] != expected:
                raise KefuError(
                    "KEFU_DELIVERY_PRAGMA_MISMATCH",
                    f"{self.path}: PRAGMA {name} is {actual[0]!r}, expected {expected!r}",
                    "check that the file system supports this mode (WAL needs shared memory)",
                )
        if dbapi.kefu_guard is not None:
            try:
                fence.install(dbapi)
            except sqlite3.Error as error:
                raise as_sqlalchemy_error("fence triggers", error) from error

    @contextmanager
    def _checkout(self) -> Iterator[_Connection]:
        """An idle connection of the pool, or a new one. EXCLUSIVE locking allows a single
        holder: the threads take turns on one connection, and a transaction inside another one
        fails (busy)."""
        if os.getpid() != self._pid:  # a forked child must never use its parent's connections
            raise RuntimeError("a DeliveryStore is used across a fork: open a new one in the child")
        with self._exclusive or nullcontext():
            with self._opened_lock:
                while self._idle and self._idle[-1].kefu_generation != self._generation:
                    self._idle.pop()  # closed by close() meanwhile
                dbapi = self._idle.pop() if self._idle else None
            if dbapi is None:
                dbapi = self._connect()
            with self._opened_lock:
                self._busy.add(dbapi)
            try:
                yield dbapi
            finally:
                if dbapi.in_transaction:  # an error inside BEGIN/COMMIT handling: never reuse it half-done
                    dbapi.execute("ROLLBACK")
                _end_write(dbapi)
                with self._opened_lock:
                    self._busy.discard(dbapi)
                    stale = dbapi.kefu_generation != self._generation or len(self._idle) >= IDLE_KEPT
                    if stale:
                        self._opened.discard(dbapi)
                    else:
                        self._idle.append(dbapi)
                if stale:  # close() ran while it was in use, or the pool is full: closed now that it is free
                    dbapi.close()

    @contextmanager
    def _writers_turn(self) -> Iterator[None]:
        """This process's turn to write, taken before a connection is: writers that wait hold no
        connection of the pool (`_begin_write` takes the same re-entrant lock again)."""
        try:
            _wait_for_turn(self._writers, self.settings.busy_timeout_ms)
        except sqlite3.Error as error:
            raise as_sqlalchemy_error("BEGIN", error) from error
        try:
            yield
        finally:
            self._writers.release()

    @contextmanager
    def _transaction(self, write: bool, durable: bool = False) -> Iterator[Connection]:
        with self._writers_turn() if write else nullcontext(), self._checkout() as dbapi, synchronous(dbapi, durable):
            try:
                _begin(dbapi, write)
            except sqlite3.Error as error:  # as SQLAlchemy would raise it (busy, damaged: callers catch those)
                raise as_sqlalchemy_error("BEGIN", error) from error
            try:
                yield Connection(dbapi)
            except BaseException as error:
                instead = _rollback(dbapi, error)
                if instead is not None:
                    raise instead from None
                raise
            try:
                _commit(dbapi)
            except sqlite3.Error as error:
                raise as_sqlalchemy_error("COMMIT", error) from error

    def trace(self, callback: Callable[[str], None] | None) -> None:
        """Pass every statement this store runs to `callback` (benchmarks and tests count them)."""
        self._trace = callback
        with self._opened_lock:
            for dbapi in self._opened:
                dbapi.set_trace_callback(callback)

    # -- transactions ------------------------------------------------------------------
    def write(self, durable: bool = False) -> AbstractContextManager[Connection]:
        """One write transaction; commits on success, rolls back on any error. `durable`: the
        commit is on disk when this returns (see `synchronous`)."""
        return self._transaction(write=True, durable=durable)

    def read(self) -> AbstractContextManager[Connection]:
        """A consistent read snapshot that takes no write lock."""
        return self._transaction(write=False)

    @contextmanager
    def raw(self) -> Iterator[Connection]:
        """A connection of the pool in autocommit mode, for hot paths that run several short
        transactions with `immediate()`."""
        with self._checkout() as dbapi:
            yield Connection(dbapi)

    def close(self) -> None:
        """Close every connection: idle ones now, one in a transaction when it ends (the store
        opens new ones when it is used again)."""
        if os.getpid() != self._pid:
            return  # a forked child's copies: closing them could checkpoint the parent's WAL
        with self._opened_lock:
            self._generation += 1
            idle = [dbapi for dbapi in self._opened if dbapi not in self._busy]
            for dbapi in idle:
                self._opened.discard(dbapi)
        for dbapi in idle:
            dbapi.close()

    # -- schema ------------------------------------------------------------------------
    def user_version(self) -> int:
        with self.read() as conn:
            return user_version(conn)

    def _migrate(self) -> None:
        """Bring the file to LATEST_VERSION, retrying under SQLITE_BUSY within the budget."""
        deadline = time.monotonic() + self.settings.migration_retry_budget_ms / 1000
        for delay in STORE_MIGRATION_BUSY.waits_s():
            try:
                return self._migrate_once()
            except OperationalError as error:
                if not _is_busy(error):
                    raise
                if time.monotonic() + delay > deadline:
                    raise KefuError(
                        "KEFU_DELIVERY_SQLITE_BUSY",
                        f"{self.path} stayed locked by another process while opening it; "
                        "the schema version is unchanged",
                        "stop the other process holding the file, or raise KEFU_DELIVERY__MIGRATION_RETRY_BUDGET_MS",
                    ) from None
                time.sleep(delay)

    def _migrate_once(self) -> None:
        with self.raw() as conn:
            migrate(conn, MIGRATIONS, str(self.path))
