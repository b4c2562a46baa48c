"""Buyer read receipts travel the receipts queue of a real worker and are stored once."""

from __future__ import annotations

import celery.contrib.testing.tasks  # noqa: F401  (registers celery.ping for start_worker)
from celery.contrib.testing.worker import start_worker

from runtime.operators.status import is_quiet, stage_counts
from tests.integration.helpers import wait_all_answered, wait_for
from tests.log_capture import captured
from worker.celery_app import make_app


def _reads(store) -> list[tuple]:
    with store.read() as conn:
        return conn.execute("SELECT platform_message_id, reader_id, delivered_at FROM buyer_read").all()


def test_a_buyer_receipt_is_stored_once_and_wakes_no_agent(settings, store, shop, platform, transport):
    app = make_app(settings)
    with start_worker(app, pool="solo", perform_ping_check=True, shutdown_timeout=30):
        page = transport.page_of(shop, [platform.buyer_says(shop, "b1", "张三", "什么时候发货？")])
        app.send_task("kefu.ingest.page", args=[page.model_dump(mode="json")])
        wait_all_answered(store, platform, shop)
        wait_for(lambda: is_quiet(store), 30, "the turn to finish", lambda: stage_counts(store))
        [reply] = platform.received(shop)
        report = transport.read_receipt(shop, reply).model_dump(mode="json")
        for _ in range(3):  # the platform repeats itself
            app.send_task("kefu.receipts.buyer_read", args=[report])
        wait_for(lambda: _reads(store) != [], 30, "the receipt to be stored")
    assert _reads(store) == [(reply.platform_message_id, "b1", None)]  # not delivered: no turn was started
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM admission_batch").scalar() == 1


def test_a_malformed_receipt_is_refused_naming_the_field_not_its_value(settings, store, shop):
    app = make_app(settings)
    bad = {
        "account_id": shop,
        "conversation_id": "c",
        "platform_message_id": "m",
        "reader_id": "秘密",
        "read_at": "昨天",
    }
    with captured("runtime.pipeline") as seen:
        assert app.tasks["kefu.receipts.buyer_read"].apply(args=[bad]).get() == "invalid"
    assert seen == ["buyer read receipt rejected: invalid read_at"]  # the field, never its value
    assert _reads(store) == []
