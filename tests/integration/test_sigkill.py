"""A worker killed with SIGKILL mid-task is restarted; every buyer message is answered once."""

from __future__ import annotations

from runtime.agent.session_log import SessionLog, UserMessage
from runtime.agent.sessions import session_path
from runtime.operators.status import is_quiet, stage_counts
from tests.integration.helpers import wait_all_answered, wait_for, wait_runs
from worker.audit import audit
from worker.celery_app import make_app
from worker.process import WorkerProcess


def _env(settings, **extra: str) -> dict[str, str]:
    return {
        "KEFU_DATA_DIR": str(settings.data_dir),
        "KEFU_BROKER_URL": settings.broker_url,
        "KEFU_RECONCILE__INTERVAL_S": "0.5",
        "KEFU_RECONCILE__GRACE_S": "1",
        "KEFU_OUTBOX__ATTEMPT_LEASE_S": "2",
        "KEFU_AGENT__TURN_LEASE_S": "2",
        "KEFU_DINGTALK__TIMEOUT_S": "0.5",
        "KEFU_WANGWANG__TIMEOUT_S": "1",
        **extra,
    }


def test_sigkill_during_a_send_loses_nothing_and_sends_nothing_twice(settings, store, shop, platform, transport):
    app = make_app(settings)
    log = settings.data_dir / "worker.log"
    # The platform records each send at once but answers 5 s later: a kill lands mid-send.
    worker = WorkerProcess(_env(settings, KEFU_SIMULATOR__SEND_LATENCY_MS="5000"), log).start()
    try:
        worker.wait_ready(app)
        for round_ in range(2):
            for buyer in ("b1", "b2", "b3"):
                message = platform.buyer_says(shop, buyer, f"买家{buyer}", ["什么时候发货", "可以退货吗"][round_])
                app.send_task("kefu.ingest.page", args=[transport.page_of(shop, [message]).model_dump(mode="json")])
        wait_for(lambda: len(platform.received(shop)) >= 1, 30, "the first send to reach the platform")
        worker.kill()
    finally:
        worker.stop()
    with store.read() as conn:
        in_flight = conn.execute(
            "SELECT count(*) FROM outbox_attempt WHERE state = 'started' AND finished_at IS NULL"
        ).scalar_one()
    assert in_flight == 1, "the kill must land while an attempt is in flight"
    assert len(platform.received(shop)) == 1

    restarted = WorkerProcess(_env(settings), log).start()
    try:
        restarted.wait_ready(app)
        wait_all_answered(store, platform, shop, timeout_s=60)
        wait_for(lambda: is_quiet(store), 30, "the pipeline to go quiet", lambda: stage_counts(store))
        wait_runs(log)  # reconciler passes after it: nothing may be sent again
        result = audit(store, platform, shop)
    finally:
        restarted.stop()
    assert (result.buyer_messages, result.answered, result.duplicate_replies, result.lost) == (6, 6, 0, 0)
    with store.read() as conn:
        states = dict(conn.execute("SELECT state, count(*) FROM outbox_request GROUP BY state").all())
        attempts = conn.execute("SELECT count(*) FROM outbox_attempt").scalar_one()
    assert states == {"sent": len(platform.received(shop))}
    # The interrupted attempt was settled by a receipt query, never attempted a second time.
    assert attempts == states["sent"]


QUESTION = "好的，请问您的订单号是多少？我帮您处理。"


def _question(store) -> tuple[str, str, str | None] | None:
    with store.read() as conn:
        return conn.execute("SELECT request_id, state, offered_batch FROM pending_question").first()


def test_a_question_asked_before_a_sigkill_is_offered_to_the_buyers_answer(settings, store, shop, platform, transport):
    app = make_app(settings)
    log = settings.data_dir / "worker.log"
    worker = WorkerProcess(_env(settings, KEFU_SIMULATOR__SEND_LATENCY_MS="5000"), log).start()
    try:
        worker.wait_ready(app)
        asked = platform.buyer_says(shop, "b1", "买家b1", "我的地址写错了")
        app.send_task("kefu.ingest.page", args=[transport.page_of(shop, [asked]).model_dump(mode="json")])
        wait_for(lambda: len(platform.received(shop)) >= 1, 30, "the question to reach the platform")
        worker.kill()  # mid-send: the process that asked is gone, with all it held in memory
    finally:
        worker.stop()
    kept = _question(store)
    assert kept is not None and kept[1] == "pending"

    restarted = WorkerProcess(_env(settings), log).start()
    try:
        restarted.wait_ready(app)
        answer = platform.buyer_says(shop, "b1", "买家b1", "订单号 A7731")
        app.send_task("kefu.ingest.page", args=[transport.page_of(shop, [answer]).model_dump(mode="json")])
        wait_for(lambda: (_question(store) or ("", "", None))[1] == "offered", 60, "the answer's turn")
        wait_for(lambda: is_quiet(store), 30, "the pipeline to go quiet", lambda: stage_counts(store))
    finally:
        restarted.stop()
    request_id, _, batch_id = _question(store)  # type: ignore[misc]
    assert request_id == kept[0]
    with store.read() as conn:
        session_id = conn.execute("SELECT session_id FROM customer").scalar_one()
    events = SessionLog(session_path(settings.sessions_dir, session_id)).load()
    [text] = [e.text for e in events if isinstance(e, UserMessage) and e.source == batch_id]
    assert text.startswith("[kefu] 你在 ") and f"「{QUESTION}」" in text and "订单号 A7731" in text
    assert [m.text for m in platform.received(shop)].count(QUESTION) == 1  # asked once, kill or not
