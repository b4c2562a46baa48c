"""Simulation batches end to end: `kefu simulate batch` runs 20 scripted conversations at
concurrency 4 through a real worker (listener, ingest, admission, turns, outbox) on a script
clock spanning days, with group mentions and a photo; and a batch survives its worker's SIGKILL
mid-run without a second reply, the platform's echo of each send filed once as the shop's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from config import Settings
from runtime.agent.session_log import SessionLog, UserMessage
from runtime.agent.sessions import session_path
from runtime.store import DeliveryStore
from tests.integration.helpers import wait_for, worker_env
from transports.simulator import SimulatedPlatform
from transports.simulator.script import Script
from worker.celery_app import make_app
from worker.demo import PHOTO
from worker.process import WorkerProcess
from worker.simulation import BatchReport, Simulation, ensure_sample_shop

DAY_MS = 86_400_000
TUESDAY_9 = 1_772_499_600_000  # 2026-03-03T09:00:00+08:00
QUESTIONS = [  # the sample FAQ's questions and a phrase of each answer
    ("今天下单什么时候发货？", "48小时内发货"),
    ("可以开发票吗", "电子普通发票"),
    ("能用花呗分期吗？", "花呗"),
    ("有优惠券吗", "满199减20"),
    ("这款是什么材质的？", "纯棉"),
]


def conversation(n: int) -> dict[str, Any]:
    """Conversation n of the batch: its own buyer, days apart on the script clock; every fifth in
    a group (a line to the others, then a mention), every seventh with a photo."""
    ask, answer = QUESTIONS[n % len(QUESTIONS)]
    later = TUESDAY_9 + (n % 4 + 1) * DAY_MS
    buyer = {"id": f"b{n}", "name": f"买家{n}"}
    if n % 5 == 4:
        steps: list[dict[str, Any]] = [
            {"say": "有人买过吗"},  # to the group, not the shop: no reply of its own
            {"at": later, "say": f"@小满家居 {ask}", "mention": True, "expect": {"contains": answer}},
        ]
        return {"name": f"c{n}", "buyer": buyer, "group": {"id": f"g{n}", "title": f"团购群{n}"}, "steps": steps}
    steps = [
        {"say": ask, "expect": {"contains": answer, "handoff": False}},
        {"at": later, "say": "好的，谢谢", "read": n == 0, "expect": {"contains": "不客气"}},
    ]
    if n % 7 == 6:
        steps.insert(1, {"say": "收到的枕套有破损", "image": "photo.png", "expect": {"contains": "补发或退款"}})
    return {"name": f"c{n}", "buyer": buyer, "steps": steps}


def run_kefu(tmp_path: Path, data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEFU_")}
    env |= {"KEFU_DATA_DIR": str(data_dir), "COLUMNS": "200", "KEFU_SIMULATOR__ECHOES": "true", "KEFU_LANGUAGE": "en"}
    command = [str(Path(sys.executable).parent / "kefu"), *args]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def test_a_batch_of_20_runs_at_concurrency_4_on_a_script_clock_and_reports_in_input_order(tmp_path: Path) -> None:
    (tmp_path / "photo.png").write_bytes(PHOTO)
    wrong = {
        "name": "wrong",
        "buyer": {"id": "w", "name": "挑剔"},
        "steps": [{"say": "可以开发票吗", "expect": {"contains": "包邮"}}],
    }
    script = tmp_path / "batch.yaml"
    conversations = [*map(conversation, range(20)), wrong]
    script.write_text(yaml.safe_dump({"start": TUESDAY_9, "conversations": conversations}, allow_unicode=True), "utf-8")
    data_dir = tmp_path / "var"

    run = run_kefu(tmp_path, data_dir, "simulate", "batch", str(script), "--concurrency", "4", "--json")
    assert run.returncode == 1, run.stdout + run.stderr  # one expectation was wrong
    report = BatchReport.model_validate(json.loads(run.stdout))
    assert [c.name for c in report.conversations] == [f"c{n}" for n in range(20)] + ["wrong"]
    *batch, failed = report.conversations
    assert all(c.passed and c.error is None and c.result_unknown == 0 for c in batch), [
        (c.name, c.error, [k for k in c.checks if not k.passed]) for c in batch if not c.passed
    ]
    assert [(k.step, k.expectation, k.passed) for k in failed.checks] == [(1, "contains '包邮'", False)]
    groups = [c for n, c in enumerate(batch) if n % 5 == 4]
    assert all(c.replies == 1 and (c.checks[0].expectation, c.checks[0].passed) == ("no reply", True) for c in groups)
    assert all(c.first_reply_ms is not None and c.first_reply_ms >= 0 for c in batch)

    store = DeliveryStore(data_dir / "delivery-default.sqlite")
    with store.read() as conn:
        rows = conn.execute(
            "SELECT c.conversation_id, m.content_type, m.occurred_at, m.mention FROM inbound_message m"
            " JOIN customer c ON c.id = m.customer_id WHERE m.sender_role = 'external' ORDER BY m.id"
        ).all()
    with store.read() as conn:
        echoes = conn.execute("SELECT count(*) FROM inbound_message WHERE sender_role = 'ai'").scalar_one()
        reads = conn.execute("SELECT count(*) FROM buyer_read").scalar_one()
    # Echoes are filed as the shop's own lines (none answered); the last ones may come after the
    # run's worker stopped. c0 read its first reply before its second step.
    assert 0 < echoes <= sum(c.replies for c in report.conversations) and reads == 1
    times = {at for _, _, at, _ in rows}
    assert min(times) >= TUESDAY_9 and max(times) >= TUESDAY_9 + 4 * DAY_MS  # the script's days, not today
    assert Counter(kind for _, kind, _, _ in rows)["image"] == 2  # c6 and c13
    assert {mention for conversation_id, _, _, mention in rows if "sim-group-" in conversation_id} == {0, 1}
    # The photo reached the agent as media: its turn read it as an image line.
    with store.read() as conn:
        session_id = conn.execute(
            "SELECT c.session_id FROM customer c JOIN inbound_message m ON m.customer_id = c.id"
            " WHERE m.content_type = 'image' LIMIT 1"
        ).scalar_one()
    log = SessionLog(session_path(data_dir / "sessions" / "default", session_id))
    log.load()
    assert any(isinstance(e, UserMessage) and "] [image]" in e.text for e in log.events)
    # The agent lives in the script's days: its labels read script time, not the run's.
    labels = {e.text[1:11] for e in log.events if isinstance(e, UserMessage)}
    assert labels and labels <= {f"2026-03-0{day}" for day in range(3, 8)}, labels

    table = run_kefu(tmp_path, data_dir, "simulate", "batch", str(script), "--concurrency", "4")
    assert table.returncode == 1 and "wrong: step 1: expected contains '包邮'" in table.stdout
    assert "21 conversations" in table.stdout and "20 passed, 1 failed" in table.stdout


def echoes(store: DeliveryStore) -> int:
    with store.read() as conn:
        return int(conn.execute("SELECT count(*) FROM inbound_message WHERE sender_role = 'ai'").scalar_one())


def test_a_batch_survives_its_worker_killed_mid_run_without_a_second_reply(settings: Settings) -> None:
    store = DeliveryStore(settings.delivery_path, settings.delivery)
    ensure_sample_shop(store, "sim-shop")
    platform = SimulatedPlatform(settings.simulator_path)
    steps = [{"say": ask, "expect": {"contains": answer}} for ask, answer in QUESTIONS]
    script = Script.model_validate(
        {
            "conversations": [
                {"name": f"c{n}", "buyer": {"id": f"b{n}", "name": "买家"}, "steps": steps} for n in range(8)
            ]
        }
    )
    simulation = Simulation(store, platform, "sim-shop", script, step_timeout_s=120)
    env = worker_env(
        settings,
        KEFU_RECONCILE__INTERVAL_S="1",
        KEFU_RECONCILE__GRACE_S="2",
        KEFU_AGENT__TURN_LEASE_S="5",  # a turn the kill cut short holds its customer this long
        KEFU_SIMULATOR__ECHOES="true",
    )
    app = make_app(settings)
    worker = WorkerProcess(env, settings.data_dir / "worker.log", listen=True).start()
    worker.wait_ready(app)
    reports: list[BatchReport] = []
    runner = threading.Thread(target=lambda: reports.append(simulation.run_batch(concurrency=4)))
    runner.start()
    try:
        wait_for(lambda: len(platform.received()) >= 8, 60, "the batch under way")
        worker.kill()  # SIGKILL mid-batch: turns and sends in flight die with it
        worker = WorkerProcess(env, settings.data_dir / "worker.log", listen=True).start()
        worker.wait_ready(app)
        runner.join(300)
        wait_for(lambda: echoes(store) == len(platform.received()), 30, "every send's echo filed")
    finally:
        worker.stop()
    [report] = reports
    assert report.passed, [(c.name, c.error, [k for k in c.checks if not k.passed]) for c in report.conversations]
    sends = Counter(send.client_ref for send in platform.received())
    assert sends and max(sends.values()) == 1  # no request sent twice
    assert all(c.replies == len(QUESTIONS) for c in report.conversations)  # one reply per buyer turn
