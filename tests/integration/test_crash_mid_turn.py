"""SIGKILL between `tool/call` and `tool/result` of im_send_message: repaired, one follow-up, one reply."""

from __future__ import annotations

import sqlite3

from runtime.agent.session_log import SessionLog
from runtime.operators.status import is_quiet, stage_counts
from tests.fakes.openai_server import FakeOpenAI, Step, completion
from tests.integration.helpers import wait_for
from worker.celery_app import make_app
from worker.process import WorkerProcess


def _env(settings, fake: FakeOpenAI, grace_s: str = "1") -> dict[str, str]:
    return {
        "KEFU_DATA_DIR": str(settings.data_dir),
        "KEFU_BROKER_URL": settings.broker_url,
        "KEFU_AGENT__PROVIDER": "openai",
        "KEFU_AGENT__OPENAI__BASE_URL": fake.base_url,
        "KEFU_AGENT__OPENAI__API_KEY": "sk-test",
        "KEFU_AGENT__OPENAI__MODEL": "fake-model",
        "KEFU_AGENT__TURN_LEASE_S": "4",
        "KEFU_AGENT__OPENAI__TIMEOUT_S": "1.5",
        "KEFU_AGENT__OPENAI__MAX_ATTEMPTS": "1",
        "KEFU_RECONCILE__INTERVAL_S": "0.5",
        "KEFU_RECONCILE__GRACE_S": grace_s,
    }


def _log(settings) -> SessionLog | None:
    paths = list(settings.sessions_dir.glob("*.jsonl.zst"))
    return SessionLog(paths[0]) if paths else None


def _tool_call_started(settings) -> bool:
    log = _log(settings)
    return log is not None and any(e.type == "tool/call" for e in log.load())


def test_sigkill_mid_tool_call_is_repaired_and_answered_once(settings, store, shop, platform, transport):
    app = make_app(settings)
    message = platform.buyer_says(shop, "b1", "张三", "什么时候发货")
    with FakeOpenAI() as fake:
        # The model takes 1 s to ask for the send; meanwhile the store's write lock is taken, so the
        # tool blocks right after `tool/call` is durable. Then the worker dies.
        send = completion(None, [("call-1", "im_send_message", '{"text": "现货48小时内发货"}')])
        fake.script.append(Step(delay_s=1.0, body=send))
        # No catch-up in this phase: the page goes in exactly when the test sends it.
        worker = WorkerProcess(_env(settings, fake, grace_s="600"), settings.data_dir / "worker.log").start()
        holder = sqlite3.connect(settings.delivery_path, isolation_level=None, timeout=10)
        try:
            worker.wait_ready(app)
            app.send_task("kefu.ingest.page", args=[transport.page_of(shop, [message]).model_dump(mode="json")])
            wait_for(lambda: len(fake.requests) == 1, 30, "the model call")
            holder.execute("BEGIN IMMEDIATE")
            wait_for(lambda: _tool_call_started(settings), 30, "tool/call in the session log")
            worker.kill()
        finally:
            holder.close()
            worker.stop()
        assert platform.received(shop) == []

        restarted = WorkerProcess(_env(settings, fake), settings.data_dir / "worker.log").start()
        try:
            restarted.wait_ready(app)
            wait_for(lambda: len(platform.received(shop)) == 1, 60, "the reply", lambda: stage_counts(store))
            wait_for(lambda: is_quiet(store), 30, "the pipeline to go quiet", lambda: stage_counts(store))
        finally:
            restarted.stop()

    events = _log(settings).load()
    closers = [(e.type, getattr(e, "code", None) or getattr(e, "outcome", None)) for e in events]
    first_end = next(i for i, e in enumerate(events) if e.type == "turn/end")
    assert closers[first_end - 2 : first_end + 1] == [
        ("tool/result", "TOOL_OUTCOME_UNKNOWN"),
        ("step/end", None),
        ("turn/end", "interrupted"),
    ]
    assert [e.kind for e in events if e.type == "turn/start"] == ["batch", "follow-up"]
    assert [e.outcome for e in events if e.type == "turn/end"] == ["interrupted", "complete"]
    assert len(platform.received(shop)) == 1
    with store.read() as conn:
        assert conn.execute("SELECT state FROM outbox_request").scalars().all() == ["sent"]
