"""Delivery store: PRAGMAs, migrations from a real older file, refusal of a newer one."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from pathlib import Path

import pytest

from config import DeliverySettings
from runtime.errors import KefuError
from runtime.store import LATEST_VERSION, DeliveryStore
from runtime.store.tables import ROWS

FIXTURE = Path(__file__).parents[1] / "fixtures" / "delivery-v1.sqlite"


def test_pragmas_are_applied_and_read_back(tmp_path):
    store = DeliveryStore(tmp_path / "d.sqlite", DeliverySettings(busy_timeout_ms=1234, cache_size_kib=4096))
    with store.read() as conn:
        assert conn.execute("PRAGMA journal_mode").scalar_one() == "wal"
        assert conn.execute("PRAGMA busy_timeout").scalar_one() == 1234
        assert conn.execute("PRAGMA cache_size").scalar_one() == -4096
        assert conn.execute("PRAGMA foreign_keys").scalar_one() == 1


def test_delete_journal_and_exclusive_locking(tmp_path):
    path = tmp_path / "d.sqlite"
    store = DeliveryStore(path, DeliverySettings(journal_mode="DELETE", locking_mode="EXCLUSIVE"))
    with store.write() as conn:
        assert conn.execute("PRAGMA journal_mode").scalar_one() == "delete"
        assert conn.execute("PRAGMA locking_mode").scalar_one() == "exclusive"
    other = sqlite3.connect(path, timeout=0.1)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        other.execute("SELECT count(*) FROM account").fetchone()
    store.close()


def test_new_file_is_at_latest_version_and_every_row_models_table_has_its_columns(tmp_path):
    store = DeliveryStore(tmp_path / "d.sqlite")
    assert store.user_version() == LATEST_VERSION
    with store.read() as conn:
        for model in ROWS:
            columns = {row[1] for row in conn.execute(f"PRAGMA table_info({model.__tablename__})")}
            assert columns == set(model.model_fields), model.__tablename__


def test_version_1_file_is_migrated_keeping_its_rows(tmp_path):
    path = tmp_path / "d.sqlite"
    shutil.copy(FIXTURE, path)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 1
    store = DeliveryStore(path)
    assert store.user_version() == LATEST_VERSION
    with store.read() as conn:
        assert conn.execute("SELECT body FROM inbound_message").scalar_one() == "什么时候发货"
        assert conn.execute("SELECT state FROM outbox_request").scalar_one() == "pending"
        assert conn.execute("SELECT count(*) FROM lease").scalar_one() == 0
        assert conn.execute("SELECT handling_reason FROM customer").scalar_one() is None
        assert conn.execute("SELECT revision, generation FROM route").one() == (1, 1)
        assert conn.execute("SELECT count(*) FROM operation").scalar_one() == 0
        indexes = {row[1] for row in conn.execute("PRAGMA index_list(outbox_request)")}
    assert {"outbox_pending", "outbox_sending", "outbox_unknown"} <= indexes and "outbox_unsettled" not in indexes
    DeliveryStore(path)  # reopening a migrated file is a no-op


@pytest.mark.parametrize(
    ("query", "index"),
    [
        (
            "SELECT id FROM inbound_message WHERE customer_id = 1 AND state = 'pending' ORDER BY id LIMIT 5",
            "inbound_pending",
        ),
        (
            "SELECT DISTINCT customer_id FROM inbound_message WHERE state = 'pending' AND received_at < 5",
            "inbound_pending",
        ),
        (
            "SELECT request_id FROM outbox_request WHERE customer_id = 1 AND state = 'pending' ORDER BY rowid",
            "outbox_pending",
        ),
        ("SELECT request_id FROM outbox_request WHERE state = 'sending' AND updated_at < 5", "outbox_sending"),
        (
            "SELECT request_id FROM outbox_request WHERE state = 'result-unknown' AND receipt_queries < 5",
            "outbox_unknown",
        ),
    ],
)
def test_queries_on_open_work_read_only_open_work(store, query, index):
    """Open work is found through its state's partial index, never by reading what is stored."""
    with store.read() as conn:
        plan = " ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {query}"))
    assert f"USING INDEX {index}" in plan and "TEMP B-TREE" not in plan


def test_newer_file_is_refused_untouched(tmp_path):
    path = tmp_path / "d.sqlite"
    DeliveryStore(path).close()
    sqlite3.connect(path).execute(f"PRAGMA user_version = {LATEST_VERSION + 1}")
    with pytest.raises(KefuError) as raised:
        DeliveryStore(path)
    assert raised.value.code == "KEFU_SCHEMA_TOO_NEW"
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == LATEST_VERSION + 1


def test_migration_gives_up_on_a_held_lock_within_its_budget(tmp_path):
    path = tmp_path / "d.sqlite"
    shutil.copy(FIXTURE, path)
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    settings = DeliverySettings(journal_mode="DELETE", busy_timeout_ms=50, migration_retry_budget_ms=300)
    try:
        with pytest.raises(KefuError) as raised:
            DeliveryStore(path, settings)
    finally:
        holder.execute("ROLLBACK")
    assert raised.value.code == "KEFU_DELIVERY_SQLITE_BUSY"
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 1


def test_migration_waits_for_a_short_lock(tmp_path):
    path = tmp_path / "d.sqlite"
    shutil.copy(FIXTURE, path)
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    threading.Timer(0.3, lambda: holder.execute("ROLLBACK")).start()
    store = DeliveryStore(
        path, DeliverySettings(journal_mode="DELETE", busy_timeout_ms=50, migration_retry_budget_ms=5000)
    )
    assert store.user_version() == LATEST_VERSION


def test_a_write_that_cannot_begin_raises_the_driver_error_callers_handle(tmp_path):
    """BEGIN runs on the DBAPI connection; a busy file still surfaces as SQLAlchemy's
    OperationalError, which migrations retry and operator commands turn into a KEFU_ code."""
    from sqlalchemy.exc import OperationalError

    path = tmp_path / "d.sqlite"
    store = DeliveryStore(path, DeliverySettings(busy_timeout_ms=50))
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(OperationalError, match="locked"), store.write():
            pass
    finally:
        holder.execute("ROLLBACK")
    with store.write() as conn:  # the connection is usable again
        assert conn.execute("SELECT count(*) FROM account").scalar_one() == 0
