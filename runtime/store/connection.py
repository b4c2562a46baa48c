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
from pathlib import Path
from typing import Any

from sqlalchemy.exc import DBAPIError, MultipleResultsFound, NoResultFound, StatementError

from runtime.store import fence

Params = Mapping[str, Any] | Sequence[Any]
Row = tuple[Any, ...]


def as_sqlalchemy_error(statement: str, error: sqlite3.Error) -> StatementError:
    """A sqlite3 error as SQLAlchemy raises it (callers and the task retry policy catch those),
    its parameters never shown: they hold message bodies and provider cursors."""
    return DBAPIError.instance(statement, None, error, sqlite3.Error, hide_parameters=True)


class Connection:
    """Statements on one of kefu's SQLite connections: a delivery store's transaction, the
    autocommit connection of `DeliveryStore.raw()`, or a memory, coordination or simulator
    file's connection (`connect`). The one type through which kefu reaches SQLite."""

    __slots__ = ("dbapi",)

    def __init__(self, dbapi: sqlite3.Connection) -> None:
        self.dbapi = dbapi

    @property
    def in_transaction(self) -> bool:
        return self.dbapi.in_transaction

    def executemany(self, statement: str, rows: Iterable[Params]) -> Result:
        try:
            return Result(self.dbapi.executemany(statement, rows))
        except sqlite3.Error as error:
            if fence.refused(error):
                raise fence.lost(self.dbapi) from None
            raise as_sqlalchemy_error(statement, error) from error

    def close(self) -> None:
        self.dbapi.close()

    def execute(self, statement: str, params: Params | None = None) -> Result:
        try:
            return Result(self.dbapi.execute(statement, params or ()))
        except sqlite3.Error as error:
            if fence.refused(error):  # before any caller mistakes it for a constraint of its own
                raise fence.lost(self.dbapi) from None
            raise as_sqlalchemy_error(statement, error) from error


class Result:
    """A statement's rows: plain tuples, or dicts through `mappings()`."""

    __slots__ = ("_cursor",)

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self._cursor.lastrowid

    def __iter__(self) -> Iterator[Row]:
        return iter(self._cursor)

    def fetchone(self) -> Row | None:
        row: Row | None = self._cursor.fetchone()
        return row

    def fetchall(self) -> list[Row]:
        return self._cursor.fetchall()

    all = fetchall

    def first(self) -> Row | None:
        """The first row; the statement is reset (it holds no snapshot once its transaction ends)."""
        row: Row | None = self._cursor.fetchone()
        self._cursor.close()
        return row

    def one_or_none(self) -> Row | None:
        rows = self._cursor.fetchmany(2)
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
        return Scalars(row[0] for row in self._cursor)

    def mappings(self) -> Mappings:
        return Mappings(self)

    def _dicts(self) -> Iterator[dict[str, Any]]:
        names = tuple(column[0] for column in self._cursor.description or ())
        return (dict(zip(names, row, strict=True)) for row in self._cursor)


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
    """A connection that tells `immediate` its busy timeout (a delivery store's carry theirs)."""

    kefu_busy_timeout_ms: int


def connect(
    path: Path | str, timeout_s: float = 10.0, pragmas: Mapping[str, str] | None = None, read_only: bool = False
) -> Connection:
    """An autocommit connection to a SQLite file other than a delivery store's pool (memory,
    coordination, a simulated platform, a store's fence read without writing): kefu opens
    transactions itself (runtime.store.engine.immediate). `pragmas` are set in order
    (journal_mode first). `read_only` opens an existing file without the right to write it."""
    target = f"{Path(path).resolve().as_uri()}?mode=ro" if read_only else path
    try:
        dbapi = sqlite3.connect(
            target, uri=read_only, timeout=timeout_s, isolation_level=None, check_same_thread=False, factory=_Timed
        )
        dbapi.kefu_busy_timeout_ms = int(timeout_s * 1000)  # what `immediate` waits for another writer
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
