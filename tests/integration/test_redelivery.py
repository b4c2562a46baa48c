"""A real Celery worker (start_worker with the project app) on both brokers."""

from __future__ import annotations

import celery.contrib.testing.tasks  # noqa: F401  (registers celery.ping for start_worker)
from celery.contrib.testing.worker import start_worker
from celery.signals import task_postrun

from runtime.inbound.ingest import committed_cursor
from runtime.inbound.pages import InboundPage
from runtime.operators.status import is_quiet
from tests.integration.helpers import wait_all_answered, wait_for
from tests.partial_ingest import commit_groups
from worker.audit import audit
from worker.celery_app import make_app


def _publish(app, page: InboundPage) -> None:
    app.send_task("kefu.ingest.page", args=[page.model_dump(mode="json")])


def test_same_page_three_times_interleaved_yields_one_reply_per_message(settings, store, shop, platform, transport):
    app = make_app(settings)
    pages = []
    for buyer, text in [("b1", "什么时候发货"), ("b2", "有优惠券吗"), ("b3", "可以开发票吗"), ("b1", "发什么快递")]:
        pages.append(transport.page_of(shop, [platform.buyer_says(shop, buyer, f"买家{buyer}", text)]))
    ingested: list[str] = []

    def count_ingests(sender: object = None, **_: object) -> None:
        if getattr(sender, "name", None) == "kefu.ingest.page":
            ingested.append("page")

    task_postrun.connect(count_ingests, weak=False)
    try:
        with start_worker(app, pool="solo", perform_ping_check=True, shutdown_timeout=30):
            repeated = pages[0]
            for page in pages[1:]:
                _publish(app, repeated)
                _publish(app, page)
            _publish(app, repeated)
            wait_all_answered(store, platform, shop)
            # Every delivery, the repeats too, ingested, and nothing left to answer or send: a
            # duplicate reply would have been made by now.
            wait_for(
                lambda: len(ingested) == 7 and is_quiet(store), 30, "all 7 deliveries ingested, the pipeline quiet"
            )
            result = audit(store, platform, shop)
    finally:
        task_postrun.disconnect(count_ingests)
    assert result.buyer_messages == 4
    assert result.answered == 4
    assert result.duplicate_replies == 0
    assert result.lost == 0
    assert len(platform.received(shop)) == 4
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM inbound_message").scalar_one() == 4
        assert conn.execute("SELECT count(*) FROM page_receipt").scalar_one() == 4


def test_crash_between_group_commit_and_cursor_commit_loses_nothing(settings, store, shop, platform, transport):
    messages = [platform.buyer_says(shop, b, f"买家{b}", "请问什么时候发货") for b in ("b1", "b2", "b3")]
    page = transport.page_of(shop, messages)
    assert len(page.groups) == 3
    # The process that first received the page committed two groups, then died before the cursor.
    commit_groups(store, page, page.groups[:2])
    assert committed_cursor(store, shop, page.stream_id) is None

    app = make_app(settings)
    with start_worker(app, pool="solo", perform_ping_check=True, shutdown_timeout=30):
        _publish(app, page)  # the platform redelivers the page: the listener never ACKed it
        result = wait_all_answered(store, platform, shop)
    assert committed_cursor(store, shop, page.stream_id) == page.cursor
    assert (result.answered, result.duplicate_replies, result.lost) == (3, 0, 0)
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM inbound_message").scalar_one() == 3


def test_invalid_page_is_rejected_by_the_worker_and_writes_nothing(settings, store, shop, platform, transport):
    bad = transport.page_of(shop, [platform.buyer_says(shop, "b1", "买家", "你好")]).model_dump(mode="json")
    bad["groups"][0]["messages"][0]["occurred_at"] = "yesterday"
    good_message = platform.buyer_says(shop, "b2", "买家二", "有优惠券吗")
    app = make_app(settings)
    with start_worker(app, pool="solo", perform_ping_check=True, shutdown_timeout=30):
        app.send_task("kefu.ingest.page", args=[bad])
        _publish(app, transport.page_of(shop, [good_message]))
        wait_for(lambda: len(platform.received(shop)) == 1, 30, "the valid page's reply")
    with store.read() as conn:
        stored = conn.execute("SELECT conversation_id FROM inbound_message").scalars().all()
        customers = conn.execute("SELECT conversation_id FROM customer").scalars().all()
    assert stored == [good_message.conversation_id]
    assert customers == [good_message.conversation_id]
    assert committed_cursor(store, shop, "simulator") == str(good_message.seq)


def test_each_task_family_lands_in_exactly_one_queue(settings):
    app = make_app(settings)
    with app.connection_for_write() as conn:
        for family in ("ingest", "agent", "outbox", "placement"):
            app.send_task(f"kefu.{family}.probe", connection=conn)
        with conn.channel() as channel:
            depths = {q.name: q(channel).queue_declare(passive=False).message_count for q in app.conf.task_queues}
    assert depths == {
        "kefu.ingest.default": 1,
        "kefu.agent.default": 1,
        "kefu.outbox.default": 1,
        "kefu.receipts.default": 0,
        "kefu.memory.default": 0,
        "kefu.placement.default": 1,
    }
