"""Memory upkeep: the self-check's WARN level (scoring backlog, recall fairness, score spread,
session logs) beside its FAILs, and `kefu memory audit`, read-only unless --apply."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.agent.session_log import SessionLog
from runtime.memory.audit import apply, audit
from runtime.memory.folders import PlannedFolder
from runtime.memory.judge import judge
from runtime.memory.recall import RecallCounters, RecallState, load_state, save_state
from runtime.memory.selfcheck import selfcheck
from runtime.memory.store import MemoryStore

SCOPE = "customer-1"
HOUR_MS = 3_600_000


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "var"


@pytest.fixture
def store(data_dir: Path) -> MemoryStore:
    """24 folders of customer 1, the model scored each differently."""
    store = MemoryStore(data_dir / "memory-default.sqlite")
    planned = [
        PlannedFolder(seq=n, title=f"订单{n}", text=f"user: 订单A{1000 + n}什么时候发货？\n", event_from=0, event_to=0)
        for n in range(1, 25)
    ]
    folders = store.commit_archive(SCOPE, "plan-1", planned)
    updates = [
        {"id": f.id, "alpha": round(0.3 + n / 50, 2), "beta": n % 5 - 2, "keywords": ["订单", "发货", f"k{n}"]}
        for n, f in enumerate(folders)
    ]
    assert judge(store, SCOPE, {"updates": updates}).rejected == []
    return store


def statuses(store: MemoryStore, sessions: Path | None = None) -> dict[str, str]:
    return {c.name: c.status for c in selfcheck(store.path, sessions)}


def test_a_healthy_store_passes_and_each_warning_names_what_bent(store: MemoryStore, data_dir: Path) -> None:
    assert set(statuses(store).values()) == {"PASS"}
    sessions = data_dir / "sessions" / "default"
    assert statuses(store, sessions)["session logs"] == "WARN"  # no session logs at all
    log = SessionLog(sessions / "s1-1.jsonl.zst")
    sessions.mkdir(parents=True)
    log.load()
    log.open_for_append()
    log.append("memory/archive", plan_id="plan-gone", upto=0, folders=1, segments=1, after_percent=10.0, note="n")
    log.append("memory/recall", entries=[{"folder_id": "mem-plan-1-1", "turn": "t1"}], text="…")
    log.flush()
    [check] = [c for c in selfcheck(store.path, sessions) if c.name == "session logs"]
    assert check.status == "WARN" and "archive plan-gone not in the store" in check.detail

    state = RecallState(counters=RecallCounters(register_drops=2, re_injections=1))
    save_state(store, SCOPE, state)
    [fairness] = [c for c in selfcheck(store.path) if c.name == "recall fairness"]
    assert fairness.status == "WARN" and "register drops 2" in fairness.detail and "re-injections 1" in fairness.detail

    db = sqlite3.connect(store.path)
    with db:
        db.execute("UPDATE folder SET beta = 1.0")  # the model trusts everything alike
    assert statuses(store)["score spread"] == "WARN"
    with db:  # 6 of 24 unscored for a day: over 20% of the customer's folders
        db.execute(
            "UPDATE folder SET scored = 0, alpha = 0, beta = 0, keywords = '[]', score_source = 'pending',"
            " created_at = created_at - 86400000 WHERE seq <= 6"
        )
    db.close()
    checks = statuses(store)
    assert checks["scoring backlog"] == "FAIL" and checks["folder states"] == "PASS"


def test_the_command_prints_warnings_and_exits_0_unless_something_failed(store: MemoryStore, data_dir: Path) -> None:
    save_state(store, SCOPE, RecallState(counters=RecallCounters(degraded=3)))
    run = kefu(data_dir, "memory", "selfcheck")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "WARN recall fairness: degraded 3" in run.stdout and "0 failed" in run.stdout


def kefu(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"KEFU_DATA_DIR": str(data_dir), "PATH": os.environ["PATH"], "COLUMNS": "200", "KEFU_LANGUAGE": "en"}
    command = [str(Path(sys.executable).parent / "kefu"), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def test_audit_reads_only_and_apply_does_the_upkeep_once(store: MemoryStore, data_dir: Path) -> None:
    images = data_dir / "memory-images" / "default"
    (images / SCOPE).mkdir(parents=True)
    old, fresh = images / SCOPE / "old.png", images / SCOPE / "fresh.png"
    old.write_bytes(b"\x89PNG"), fresh.write_bytes(b"\x89PNG")
    os.utime(old, (0, 0))  # left by a crash long ago; `fresh` may belong to an archive in flight
    save_state(store, SCOPE, RecallState(block=["mem-plan-1-1", "mem-gone"], ledger={"mem-gone-too": 3}))
    db = sqlite3.connect(store.path)
    with db:
        db.execute("DELETE FROM index_entry WHERE folder_id = 'mem-plan-1-2'")
        db.execute(
            "UPDATE folder SET scored = 0, alpha = 0, beta = 0, keywords = '[]', score_source = 'pending',"
            " created_at = created_at - ? WHERE seq = 3",
            (2 * HOUR_MS,),
        )
    db.close()
    before = store.path.read_bytes()

    found = audit(store.path, images, max_folders=25, stale_after_ms=HOUR_MS)
    [scope] = found.scopes
    assert (scope.folders, scope.pending, scope.stale_pending, scope.unindexed, scope.dangling) == (24, 1, 1, 1, 2)
    assert sorted(found.orphan_images) == [f"{SCOPE}/fresh.png", f"{SCOPE}/old.png"]
    assert any("96% of the folder cap" in line for line in found.findings())
    assert store.path.read_bytes() == before  # read-only

    done = apply(store, found, images)
    assert len(done.applied) == 4 and not old.exists() and fresh.exists()
    assert load_state(store, SCOPE).block == ["mem-plan-1-1"] and load_state(store, SCOPE).ledger == {}
    again = audit(store.path, images, max_folders=10_000, stale_after_ms=HOUR_MS)
    assert again.findings() == ["1 image files no folder names"]  # the fresh one waits its hour
    assert {c.name: c.status for c in selfcheck(store.path)}["index entries match folders"] == "PASS"

    run = kefu(data_dir, "memory", "audit", "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["scopes"][0]["stale_pending"] == 0


def test_the_daily_audit_task_reports_through_the_worker_shell(store: MemoryStore, data_dir: Path) -> None:
    from config import Settings
    from worker.celery_app import make_app

    app = make_app(Settings(data_dir=data_dir))
    assert app.conf.beat_schedule["memory-audit"]["task"] == "kefu.memory.audit"
    save_state(store, SCOPE, RecallState(block=["mem-gone"]))
    findings = app.tasks["kefu.memory.audit"].apply().get()
    assert findings == [f"{SCOPE}: 1 recall state ids name no folder"]
    assert load_state(store, SCOPE).block == ["mem-gone"]  # the task only reports


def test_a_models_backlog_past_max_pending_goes_to_the_heuristic_at_once(store: MemoryStore) -> None:
    from zoneinfo import ZoneInfo

    from config import MemorySettings
    from runtime.memory.engine import MemoryEngine
    from runtime.memory.jobs import backlog

    fresh = [PlannedFolder(seq=n, title="新", text=f"user: 新问题{n}\n", event_from=0, event_to=0) for n in (1, 2, 3)]
    store.commit_archive(SCOPE, "plan-2", fresh)

    def engine(max_pending: int) -> MemoryEngine:
        settings = MemorySettings(max_pending=max_pending)
        return MemoryEngine(store, settings, 100_000, ZoneInfo("Asia/Shanghai"), model_scores=True)

    assert backlog(engine(200)) == []  # just archived: the model scores them
    assert backlog(engine(2)) == [SCOPE]  # 3 waiting, more than 2
