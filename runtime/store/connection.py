"""`Connection`: a store transaction's statements, run on the DBAPI connection itself.

kefu's queries are SQL text with `:name` parameters, which sqlite3 binds natively and keeps
prepared in its statement cache. Running them through SQLAlchemy's execution machinery cost
some 25 µs of Python per statement, more than SQLite's own work, on a path of dozens of
statements per buyer message. So a transaction hands its callers this thin view of the
sqlite3 connection instead: `execute` and the few result methods kefu reads (SQLAlchemy's
names and meanings), and SQLAlchemy's error types (callers and task retries catch those).
A whole row is written by SQL text too (runtime.store.tables.insert_row).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import TextClause
from sqlalchemy.exc import DBAPIError, MultipleResultsFound, NoResultFound, StatementError

from runtime.store import fence

Params = Mapping[str, Any] | Sequence[Any]
Row = tuple[Any, ...]


def as_sqlalchemy_error(statement: str, error: sqlite3.Error) -> StatementError:
    """A sqlite3 error as SQLAlchemy raises it (callers and the task retry policy catch those),
    its parameters never shown: they hold message bodies and provider cursors."""
    return DBAPIError.instance(statement, None, error, sqlite3.Error, hide_parameters=True)


def _text_of(statement: str | TextClause, params: Params | None) -> tuple[str, Params]:
    return (statement if isinstance(statement, str) else statement.text), params or ()


class Connection:
    """One transaction's statements on a store's sqlite3 connection (see the module)."""

    __slots__ = ("dbapi",)

    def __init__(self, dbapi: sqlite3.Connection) -> None:
        self.dbapi = dbapi

    def execute(self, statement: str | TextClause, params: Params | None = None) -> Result:
        text, bound = _text_of(statement, params)
        try:
            return Result(self.dbapi.execute(text, bound))
        except sqlite3.Error as error:
            if fence.refused(error):  # before any caller mistakes it for a constraint of its own
                raise fence.lost(self.dbapi) from None
            raise as_sqlalchemy_error(text, error) from error

    exec_driver_sql = execute


class Result:
    """A statement's rows: plain tuples, or dicts through `mappings()`."""

    __slots__ = ("_cursor",)

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

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
