"""The simulated platform's ledger file: its schema through runtime.store.migrate (a ledger made
before it had versions opens as it is, a newer one is refused), and instances numbered once
however many connections ask at a time."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from runtime.errors import KefuError
from transports.simulator.platform import MIGRATIONS, SimulatedPlatform

# The ledger as kefu made it before versions (user_version 0): buyer_message without the
# columns added since, the rest as today.
UNVERSIONED = """
CREATE TABLE buyer_message (seq INTEGER PRIMARY KEY AUTOINCREMENT, account_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL, buyer_id TEXT NOT NULL, buyer_name TEXT NOT NULL, text TEXT NOT NULL,
    occurred_at INTEGER NOT NULL);
CREATE TABLE buyer_media (seq INTEGER PRIMARY KEY REFERENCES buyer_message (seq), kind TEXT NOT NULL,
    name TEXT NOT NULL, data BLOB NOT NULL);
CREATE INDEX buyer_by_conversation ON buyer_message (conversation_id, seq);
CREATE TABLE received_send (id INTEGER PRIMARY KEY AUTOINCREMENT, platform_message_id TEXT NOT NULL UNIQUE,
    client_ref TEXT NOT NULL, account_id TEXT NOT NULL, conversation_id TEXT NOT NULL, recipient_id TEXT,
    text TEXT NOT NULL, received_at INTEGER NOT NULL, kind TEXT NOT NULL DEFAULT 'text', media_sha256 TEXT);
CREATE TABLE buyer_read (id INTEGER PRIMARY KEY AUTOINCREMENT,
    received_id INTEGER NOT NULL UNIQUE REFERENCES received_send (id), read_at INTEGER NOT NULL);
CREATE TABLE sim_instance (number INTEGER PRIMARY KEY, account_id TEXT NOT NULL, kind TEXT NOT NULL,
    buyer_id TEXT NOT NULL UNIQUE, buyer_name TEXT NOT NULL, persona TEXT, state TEXT NOT NULL,
    created_at INTEGER NOT NULL, stopped_at INTEGER);
CREATE INDEX received_by_ref ON received_send (client_ref);
CREATE INDEX received_by_conversation ON received_send (conversation_id);
INSERT INTO buyer_message (account_id, conversation_id, buyer_id, buyer_name, text, occurred_at)
    VALUES ('shop', 'sim-direct-b1', 'b1', '张三', '在吗', 1);
INSERT INTO sim_instance VALUES (7, 'shop', 'manual', 'sim-007-buyer', '李四', NULL, 'stopped', 1, 2);
"""


def _layout(path: Path) -> dict[str, object]:
    """Each table's columns and indexes, each index's name: the file's shape, not its SQL text."""
    db = sqlite3.connect(path)
    try:
        names = db.execute("SELECT name, type FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name")
        return {
            name: (
                db.execute(f"PRAGMA table_info({name})").fetchall(),
                sorted(db.execute(f"PRAGMA index_list({name})").fetchall()),
            )
            if kind == "table"
            else kind
            for name, kind in names.fetchall()
        }
    finally:
        db.close()


def _user_version(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


@pytest.mark.parametrize("added", [0, 2, 4], ids=["none", "some", "all"])
def test_a_ledger_made_before_versions_opens_with_its_rows_and_the_columns_it_lacked(
    tmp_path: Path, added: int
) -> None:
    old = tmp_path / "old.sqlite"
    db = sqlite3.connect(old)
    db.executescript(UNVERSIONED)
    columns = [
        "conversation_type TEXT NOT NULL DEFAULT 'direct'",
        "group_title TEXT",
        "mention INTEGER",
        "media_kind TEXT",
    ]
    for column in columns[:added]:  # a ledger whose column migration stopped part way
        db.execute(f"ALTER TABLE buyer_message ADD COLUMN {column}")
    db.commit()
    db.close()
    platform = SimulatedPlatform(old)
    assert _user_version(old) == MIGRATIONS[-1].version
    assert _layout(old) == _layout(SimulatedPlatform(tmp_path / "new.sqlite").path)
    [said] = platform.buyer_messages("shop")
    assert (said.text, said.conversation_type, said.mention) == ("在吗", "direct", None)
    assert platform.new_instance("shop", "manual", "王五").number == 8  # above the stopped instance 7


def test_a_ledger_newer_than_this_kefu_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "platform.sqlite"
    SimulatedPlatform(path)
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {MIGRATIONS[-1].version + 1}")
    db.close()
    with pytest.raises(KefuError) as refused:
        SimulatedPlatform(path)
    assert refused.value.code == "KEFU_SCHEMA_TOO_NEW" and str(path) in str(refused.value)


def test_ledgers_opened_at_once_number_their_instances_once(tmp_path: Path) -> None:
    """Each thread has its own connection to the file: as two processes would."""
    path = tmp_path / "platform.sqlite"
    start = threading.Barrier(6)
    numbers: list[int] = []
    failures: list[BaseException] = []

    def play() -> None:
        try:
            start.wait()
            platform = SimulatedPlatform(path)
            numbers.extend(platform.new_instance("shop", "manual", "买家").number for _ in range(10))
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=play) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert sorted(numbers) == list(range(1, 61))
