"""runtime.store.migrate: the one way each of kefu's SQLite files gets its schema."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from runtime.errors import KefuError
from runtime.store import DeliveryStore
from runtime.store.connection import Connection, connect, require_sqlite
from runtime.store.migrate import Migration, migrate, user_version

V1 = Migration(1, "notes", ("CREATE TABLE note (id INTEGER PRIMARY KEY, text TEXT NOT NULL)",))
V2 = Migration(2, "a note's author", ("ALTER TABLE note ADD COLUMN author TEXT",))


def _columns(conn: Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def test_a_new_file_gets_every_migration_and_an_older_one_only_the_missing(tmp_path: Path) -> None:
    conn = connect(tmp_path / "a.sqlite")
    migrate(conn, (V1,), "a.sqlite")
    conn.execute("INSERT INTO note (text) VALUES ('kept')")
    migrate(conn, (V1, V2), "a.sqlite")
    assert user_version(conn) == 2
    assert _columns(conn, "note") == ["id", "text", "author"]
    assert conn.execute("SELECT text FROM note").scalar_one() == "kept"
    migrate(conn, (V1, V2), "a.sqlite")  # at the latest: nothing runs again
    assert user_version(conn) == 2


def test_a_failing_migration_leaves_the_file_at_its_version_with_nothing_half_done(tmp_path: Path) -> None:
    def broken(conn: Connection) -> None:
        conn.execute("INSERT INTO no_such_table VALUES (1)")

    conn = connect(tmp_path / "a.sqlite")
    migrate(conn, (V1,), "a.sqlite")
    with pytest.raises(OperationalError, match="no_such_table"):
        migrate(conn, (V1, Migration(2, "author, then a step that fails", V2.statements, broken)), "a.sqlite")
    assert user_version(conn) == 1
    assert _columns(conn, "note") == ["id", "text"]


def test_a_file_newer_than_this_kefu_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    conn = connect(tmp_path / "a.sqlite")
    migrate(conn, (V1, V2), "a.sqlite")
    with pytest.raises(KefuError, match="a.sqlite has schema version 2; this kefu understands up to 1") as refused:
        migrate(conn, (V1,), "a.sqlite")
    assert refused.value.code == "KEFU_SCHEMA_TOO_NEW"
    assert _columns(conn, "note") == ["id", "text", "author"]


def test_a_step_runs_in_its_migration_s_transaction(tmp_path: Path) -> None:
    def fill(conn: Connection) -> None:
        assert conn.dbapi.in_transaction
        conn.execute("UPDATE note SET author = 'shop'")

    conn = connect(tmp_path / "a.sqlite")
    migrate(conn, (V1,), "a.sqlite")
    conn.execute("INSERT INTO note (text) VALUES ('old')")
    migrate(conn, (V1, Migration(2, V2.summary, V2.statements, fill)), "a.sqlite")
    assert conn.execute("SELECT author FROM note").scalar_one() == "shop"


@pytest.mark.parametrize(
    ("version", "fts5", "said"),
    [((3, 31, 1), True, "SQLite 3.31.1 is older than 3.37.0"), ((3, 45, 0), False, "without FTS5's trigram")],
)
def test_a_python_whose_sqlite_cannot_hold_kefus_files_is_refused_with_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: tuple[int, int, int], fts5: bool, said: str
) -> None:
    """An old or FTS5-less SQLite cannot exist on this machine: its version and its refusal of
    the index are what the check reads, so they are what is stood in for."""
    monkeypatch.setattr(sqlite3, "sqlite_version_info", version)
    monkeypatch.setattr(sqlite3, "sqlite_version", ".".join(map(str, version)))
    if not fts5:
        real_connect = sqlite3.connect

        def connect(*args: object, **kwargs: object) -> sqlite3.Connection:
            db = real_connect(*args, **kwargs)  # type: ignore[arg-type]
            db.set_authorizer(lambda action, *_: sqlite3.SQLITE_DENY if action == sqlite3.SQLITE_CREATE_VTABLE else 0)
            return db

        monkeypatch.setattr(sqlite3, "connect", connect)
    require_sqlite.cache_clear()
    try:
        with pytest.raises(KefuError) as refused:
            DeliveryStore(tmp_path / "delivery.sqlite")
    finally:
        monkeypatch.undo()
        require_sqlite.cache_clear()
    assert refused.value.code == "KEFU_SQLITE_UNSUITED" and said in refused.value.message
    assert "3.37 or newer" in refused.value.action
    assert not (tmp_path / "delivery.sqlite").exists()  # refused before any file was made
