"""`Connection`: the one way kefu reaches SQLite, a thin view of a sqlite3 connection.

kefu's statements are named SQL text (runtime.store.queries) with `:name` or `?` parameters,
which sqlite3 binds natively and keeps prepared in its statement cache. Running them through
SQLAlchemy's execution machinery cost some 25 µs of Python per statement, more than SQLite's
own work, on a path of dozens of statements per buyer message. So every store (delivery,
memory, coordination, a simulated platform's ledger) hands its callers this view instead:
`execute` and the few result methods kefu reads (SQLAlchemy's names and meanings), and
SQLAlchemy's error types (callers and task retries catch those). A whole row is written by
SQL text too (runtime.store.tables.insert_row).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import closing
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy.exc import DBAPIError, MultipleResultsFound, NoResultFound, StatementError

from runtime.errors import KefuError
from runtime.store import fence

# RETURNING (3.35), pragma_table_list (3.37); the delivery store's search index (V32) needs
# FTS5's trigram tokenizer (3.34, and FTS5 built in).
SQLITE_NEEDED = (3, 37, 0)

Params = Mapping[str, Any] | Sequence[Any]
Row = tuple[Any, ...]


def as_sqlalchemy_error(statement: str, error: sqlite3.Error) -> StatementError:
    """A sqlite3 error as SQLAlchemy raises it (callers and the task retry policy catch those),
    its parameters never shown: they hold message bodies and provider cursors."""
    return DBAPIError.instance(statement, None, error, sqlite3.Error, hide_parameters=True)


def _failure(error: sqlite3.Error, dbapi: sqlite3.Connection, statement: str) -> Exception:
    """What a statement's sqlite3 error is raised as: a fence trigger's refusal is the shard
    lease lost (before any caller mistakes it for a constraint of its own); any other error is
    SQLAlchemy's, carrying the file it came from (`failed_file`)."""
    if fence.refused(error):
        return fence.lost(dbapi)
    converted = as_sqlalchemy_error(statement, error)
    converted.kefu_path = getattr(dbapi, "kefu_path", None)  # type: ignore[attr-defined]
    return converted


def failed_file(error: BaseException) -> Path | None:
    """The file whose statement raised `error` (a Connection's), when it is known."""
    path: Path | None = getattr(error, "kefu_path", None)
    return path


class Connection:
    """Statements on one of kefu's SQLite connections: a delivery store's transaction, the
    autocommit connection of `DeliveryStore.raw()`, or a memory, coordination or simulator
    file's connection (`connect`). The one type through which kefu reaches SQLite."""

    __slots__ = ("dbapi",)

    def __init__(self, dbapi: sqlite3.Connection) -> None:
        self.dbapi = dbapi

    def executemany(self, statement: str, rows: Iterable[Params]) -> Result:
        try:
            return Result(self.dbapi.executemany(statement, rows), statement)
        except sqlite3.Error as error:
            raise _failure(error, self.dbapi, statement) from error

    def close(self) -> None:
        self.dbapi.close()

    def execute(self, statement: str, params: Params | None = None) -> Result:
        try:
            return Result(self.dbapi.execute(statement, params or ()), statement)
        except sqlite3.Error as error:
            raise _failure(error, self.dbapi, statement) from error


class Result:
    """A statement's rows: plain tuples, or dicts through `mappings()`. SQLite may fail on any
    row (a damaged page, a busy file), not only when the statement starts: fetching raises
    what `execute` raises."""

    __slots__ = ("_cursor", "_statement")

    def __init__(self, cursor: sqlite3.Cursor, statement: str) -> None:
        self._cursor = cursor
        self._statement = statement

    def _failure(self, error: sqlite3.Error) -> Exception:
        return _failure(error, self._cursor.connection, self._statement)

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self._cursor.lastrowid

    def __iter__(self) -> Iterator[Row]:
        try:
            yield from self._cursor
        except sqlite3.Error as error:
            raise self._failure(error) from error

    def fetchone(self) -> Row | None:
        try:
            row: Row | None = self._cursor.fetchone()
        except sqlite3.Error as error:
            raise self._failure(error) from error
        return row

    def fetchall(self) -> list[Row]:
        try:
            return self._cursor.fetchall()
        except sqlite3.Error as error:
            raise self._failure(error) from error

    all = fetchall

    def first(self) -> Row | None:
        """The first row; the statement is reset (it holds no snapshot once its transaction ends)."""
        row = self.fetchone()
        self._cursor.close()
        return row

    def one_or_none(self) -> Row | None:
        try:
            rows = self._cursor.fetchmany(2)
        except sqlite3.Error as error:
            raise self._failure(error) from error
        self._cursor.close()
        if len(rows) > 1:
            raise MultipleResultsFound("more than one row where at most one was expected")
        return rows[0] if rows else None

    def one(self) -> Row:
        row = self.one_or_none()
        if row is None:
            raise NoResultFound("no row where exactly one was expected")
        return row

    def scalar(self) -> Any | None:
        row = self.first()
        return None if row is None else row[0]

    def scalar_one(self) -> Any:
        return self.one()[0]

    def scalar_one_or_none(self) -> Any | None:
        row = self.one_or_none()
        return None if row is None else row[0]

    def scalars(self) -> Scalars:
        return Scalars(row[0] for row in self)

    def mappings(self) -> Mappings:
        return Mappings(self)

    def _dicts(self) -> Iterator[dict[str, Any]]:
        names = tuple(column[0] for column in self._cursor.description or ())
        return (dict(zip(names, row, strict=True)) for row in self)


class Scalars:
    """The first column of each row."""

    __slots__ = ("_values",)

    def __init__(self, values: Iterator[Any]) -> None:
        self._values = values

    def __iter__(self) -> Iterator[Any]:
        return self._values

    def all(self) -> list[Any]:
        return list(self._values)

    def first(self) -> Any:
        return next(self._values, None)


class Mappings:
    """Each row as a dict of column name to value."""

    __slots__ = ("_result",)

    def __init__(self, result: Result) -> None:
        self._result = result

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self._result._dicts()

    def all(self) -> list[dict[str, Any]]:
        return list(self._result._dicts())

    def first(self) -> dict[str, Any] | None:
        row = next(self._result._dicts(), None)
        self._result._cursor.close()
        return row

    def one(self) -> dict[str, Any]:
        rows = self.all()
        if len(rows) != 1:
            raise (NoResultFound if not rows else MultipleResultsFound)(f"{len(rows)} rows where one was expected")
        return rows[0]


class _Timed(sqlite3.Connection):
    """A connection that tells `immediate` its busy timeout, and its errors their file (a
    delivery store's connections carry both)."""

    kefu_busy_timeout_ms: int
    kefu_path: Path | None


def connect(
    path: Path | str, timeout_s: float = 10.0, pragmas: Mapping[str, str] | None = None, read_only: bool = False
) -> Connection:
    """An autocommit connection to a SQLite file other than a delivery store's pool (memory,
    coordination, a simulated platform, a store's fence read without writing): kefu opens
    transactions itself (runtime.store.engine.immediate). `pragmas` are set in order
    (journal_mode first). `read_only` opens an existing file without the right to write it."""
    require_sqlite()  # before any file is made
    target = f"{Path(path).resolve().as_uri()}?mode=ro" if read_only else path
    try:
        dbapi = sqlite3.connect(
            target, uri=read_only, timeout=timeout_s, isolation_level=None, check_same_thread=False, factory=_Timed
        )
        dbapi.kefu_busy_timeout_ms = int(timeout_s * 1000)  # what `immediate` waits for another writer
        dbapi.kefu_path = None if str(path) == ":memory:" else Path(path).resolve()
    except sqlite3.Error as error:
        raise as_sqlalchemy_error("connect", error) from error
    conn = Connection(dbapi)
    try:
        for name, value in (pragmas or {}).items():
            conn.execute(f"PRAGMA {name} = {value}")
    except BaseException:
        dbapi.close()
        raise
    return conn


@cache
def require_sqlite() -> None:
    """The SQLite this Python was built with can hold kefu's files: refused before any file is
    opened (a store, a backup being checked), with what to do; not by a statement failing deep
    in a migration or a task. Checked once per process."""
    problem = None
    if sqlite3.sqlite_version_info < SQLITE_NEEDED:
        problem = f"SQLite {sqlite3.sqlite_version} is older than {'.'.join(map(str, SQLITE_NEEDED))}"
    else:
        try:
            with closing(sqlite3.connect(":memory:")) as db:
                db.execute("CREATE VIRTUAL TABLE probe USING fts5(text, tokenize = 'trigram')")
        except sqlite3.Error:
            problem = f"SQLite {sqlite3.sqlite_version} is built without FTS5's trigram tokenizer"
    if problem is not None:
        raise KefuError(
            "KEFU_SQLITE_UNSUITED",
            f"{problem}: this Python's sqlite3 module cannot hold kefu's stores",
            "run kefu on a Python whose SQLite is 3.37 or newer with FTS5 (python.org builds, Debian 12,"
            " Ubuntu 22.04, the python:3.11 images)",
        )
