"""A send that times out after the platform recorded it: result-unknown, never resent, settled
by the provider receipt query; the platform's later echo is ours and wakes no agent."""

from __future__ import annotations

import celery.contrib.testing.tasks  # noqa: F401  (registers celery.ping for start_worker)
from celery.contrib.testing.worker import start_worker

from runtime.operators.status import is_quiet, stage_counts
from tests.integration.helpers import wait_for
from worker.celery_app import make_app


def _outbox(store) -> list[tuple]:
    with store.read() as conn:
        return conn.execute(
            "SELECT r.state, r.platform_message_id, r.receipt_queries, count(a.attempt_no) FROM outbox_request r"
            " JOIN outbox_attempt a USING (request_id) GROUP BY r.request_id"
        ).all()


def test_a_timed_out_send_is_settled_by_receipt_and_its_echo_wakes_nobody(settings, store, shop, platform, transport):
    timing_out = settings.model_copy(
        update={"simulator": settings.simulator.model_copy(update={"send_timeouts": "after-submit"})}
    )
    app = make_app(timing_out)
    with start_worker(app, pool="solo", perform_ping_check=True, shutdown_timeout=30):
        page = transport.page_of(shop, [platform.buyer_says(shop, "b1", "张三", "什么时候发货？")])
        app.send_task("kefu.ingest.page", args=[page.model_dump(mode="json")])
        wait_for(
            lambda: [row[0] for row in _outbox(store)] == ["sent"] and is_quiet(store),
            30,
            "the timed-out reply to settle",
            lambda: (_outbox(store), stage_counts(store)),
        )
        [(state, platform_id, queries, attempts)] = _outbox(store)
        [received] = platform.received(shop)
        assert (platform_id, queries, attempts) == (received.platform_message_id, 1, 1)

        app.send_task("kefu.ingest.page", args=[transport.echo_page(shop, received).model_dump(mode="json")])
        wait_for(lambda: len(_inbound_roles(store)) == 2 and is_quiet(store), 30, "the echo to be stored")
    assert _inbound_roles(store) == [("external", "committed"), ("ai", "ignored")]
    assert len(platform.received(shop)) == 1  # one submission, no reply to our own echo


def _inbound_roles(store) -> list[tuple[str, str]]:
    with store.read() as conn:
        return conn.execute("SELECT sender_role, state FROM inbound_message ORDER BY id").all()
