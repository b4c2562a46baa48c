"""Pause input during a burst on a real worker: nothing is admitted after the pause, everything
in flight is committed before nothing is in flight, and resuming loses nothing."""

from __future__ import annotations

import celery.contrib.testing.tasks  # noqa: F401  (registers celery.ping for start_worker)
from celery.contrib.testing.worker import start_worker

from runtime import pipeline
from runtime.inbound.input_pause import held_pages, in_flight, pause_input
from runtime.store import now_ms
from tests.integration.helpers import wait_all_answered, wait_for
from worker.celery_app import make_app
from worker.dispatch import send


def _batches(store) -> list[int]:
    with store.read() as conn:
        return conn.execute("SELECT created_at FROM admission_batch").scalars().all()


def test_pause_and_drain_during_a_burst_then_resume_without_loss(settings, store, shop, platform, transport):
    app = make_app(settings)
    buyers = [f"b{n}" for n in range(8)]
    with start_worker(app, pool="solo", perform_ping_check=True, shutdown_timeout=30):
        for n, buyer in enumerate(buyers):
            page = transport.page_of(shop, [platform.buyer_says(shop, buyer, buyer, "什么时候发货？")])
            app.send_task("kefu.ingest.page", args=[page.model_dump(mode="json")])
            if n == 3:
                pause_input(store)
                paused_at = now_ms()
        wait_for(lambda: in_flight(store) == 0, 60, "nothing in flight", lambda: in_flight(store))
        wait_for(lambda: len(held_pages(store)) >= 4, 30, "the pages sent after the pause to be held")
        admitted = _batches(store)
        assert all(created <= paused_at for created in admitted)  # nothing admitted after the pause
        assert len(held_pages(store)) + len(admitted) <= len(buyers)

        for work in pipeline.resume(store, None).follow_ups:  # held pages, and customers kept from admission
            send(app, work)
        result = wait_all_answered(store, platform, shop, timeout_s=60)
    assert (result.buyer_messages, result.answered, result.duplicate_replies, result.lost) == (8, 8, 0, 0)
    assert held_pages(store) == []
