"""The memory store: an archive plan commits all its folders or none, a retry is idempotent,
and archived text round-trips through zstandard."""

from __future__ import annotations

import marshal
import sqlite3

import pytest
import sqlalchemy.exc

from runtime.errors import KefuError
from runtime.memory.folders import ArchivedMessage, PlannedFolder, plan_folders
from runtime.memory.store import MIGRATIONS, Folder, MemoryStore


def planned() -> list[PlannedFolder]:
    messages = [ArchivedMessage(role="user", text=f"第{n}个问题：订单A10{n}什么时候发货？", at_ms=n) for n in range(6)]
    return plan_folders(messages, target_chars=40)


def test_a_plan_commits_whole_and_a_retry_returns_the_same_folders(tmp_path):
    store = MemoryStore(tmp_path / "memory.sqlite")
    folders = planned()
    first = store.commit_archive("customer-1", "plan-a", folders)
    again = store.commit_archive("customer-1", "plan-a", folders)
    assert first == again and len(first) == len(folders) > 1
    assert all(f.alpha == 0 and f.beta == 0 and f.keywords == [] and not f.scored for f in first)
    assert "".join(store.text(f.id) for f in first) == "".join(f.text for f in folders)
    assert store.folders("customer-2") == [] and len(store.folders("customer-1")) == len(folders)


def test_a_failure_midway_leaves_nothing(tmp_path):
    store = MemoryStore(tmp_path / "memory.sqlite")
    folders = planned()
    broken = [*folders, folders[0]]  # the same seq twice: the insert fails on the last folder
    with pytest.raises(sqlalchemy.exc.IntegrityError):
        store.commit_archive("customer-1", "plan-b", broken)
    assert store.folders("customer-1") == []
    assert len(store.commit_archive("customer-1", "plan-b", folders)) == len(folders)  # the retry succeeds


def judged_folder(path, text: str, keywords: list[str]) -> Folder:
    """A store at `path` holding one scored folder of `text` (closed again)."""
    from runtime.memory.judge import judge

    store = MemoryStore(path)
    [folder] = store.commit_archive("c1", "plan-a", plan_folders([ArchivedMessage(role="user", text=text, at_ms=1)]))
    assert judge(store, "c1", {"updates": [{"id": folder.id, "alpha": 0.5, "beta": 0, "keywords": keywords}]}).updated
    store.close()
    return folder


def test_a_store_indexed_by_the_older_tokenizer_is_indexed_again_when_opened(tmp_path):
    from runtime.memory.recall import RecallIndex

    path = tmp_path / "memory.sqlite"
    folder = judged_folder(path, "Melanie painted a sunrise over the lake", ["Sunrise Lake", "art", "paint"])
    with sqlite3.connect(path) as db:  # as schema 1 left it: other terms, keywords as whole strings
        db.execute(
            "UPDATE scope_postings SET data = ?, keywords = ?, extras = ?",
            (marshal.dumps({"painted": b""}), marshal.dumps({}), marshal.dumps({})),
        )
        db.execute("PRAGMA user_version = 1")
    reopened = MemoryStore(path)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == MIGRATIONS[-1].version
    index = RecallIndex.build(reopened, "c1")
    assert folder.id in index.scores("Did she paint?")  # the stem: the new tokenizer's postings
    assert index.keyword_folders["lake"] == [folder.id]  # keywords by token


def test_a_store_of_schema_2_gains_the_postings_version_recall_keys_its_cache_on(tmp_path):
    from runtime.memory.recall import RecallIndex

    path = tmp_path / "memory.sqlite"
    folder = judged_folder(path, "订单A1024改地址到杭州", ["地址", "订单", "杭州"])
    store = MemoryStore(path)
    stamped = store.postings_version("c1")
    store.close()
    with sqlite3.connect(path) as db:  # as schema 2 left it
        db.execute("ALTER TABLE scope_postings DROP COLUMN version")
        db.execute("PRAGMA user_version = 2")
    reopened = MemoryStore(path)
    assert reopened.postings_version("c1") == stamped is not None  # the same rows: the same version
    assert folder.id in RecallIndex.of(reopened, "c1").scores("A1024")


def test_a_store_indexed_by_cjk_bigrams_is_indexed_again_by_words_when_opened(tmp_path):
    from runtime.memory.recall import RecallIndex

    path = tmp_path / "memory.sqlite"
    folder = judged_folder(path, "[2024-04-27 10:02] 我昨天买的科幻电影改地址到杭州", ["地址", "杭州", "电影"])
    bigrams = {"科幻": b"", "幻电": b"", "址到": b""}  # what schema 3's tokenizer made of it
    with sqlite3.connect(path) as db:
        db.execute("UPDATE scope_postings SET data = ?", (marshal.dumps(bigrams),))
        db.execute("PRAGMA user_version = 3")
    index = RecallIndex.build(MemoryStore(path), "c1")
    assert folder.id in index.scores("那部电影") and folder.id in index.scores("4月26号")  # 昨天 of its label
    assert index.posting("址到") == {} and index.posting("幻电") == {}


def test_an_unknown_newer_schema_is_refused(tmp_path):
    path = tmp_path / "memory.sqlite"
    MemoryStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(KefuError, match="memory.sqlite \\(a memory store\\) has schema version 99") as refused:
        MemoryStore(path)
    assert refused.value.code == "KEFU_SCHEMA_TOO_NEW"
