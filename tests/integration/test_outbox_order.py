"""Replies of one customer reach the platform in registration order, whatever the broker does."""

from __future__ import annotations

import celery.contrib.testing.tasks  # noqa: F401  (registers celery.ping for start_worker)
from celery.contrib.testing.worker import start_worker
from kombu import Queue

from config import OpenAISettings
from runtime.operators.status import is_quiet, stage_counts
from tests.fakes.openai_server import FakeOpenAI, Step, completion
from tests.integration.helpers import wait_for
from worker.celery_app import make_app, queue_name

SEND = "im_send_message"


def _requests(store) -> list[str]:
    with store.read() as conn:
        return conn.execute("SELECT request_id FROM outbox_request ORDER BY rowid").scalars().all()


def test_two_replies_of_one_turn_arrive_in_order_even_when_attempts_arrive_reversed(
    settings, store, shop, platform, transport
):
    message = platform.buyer_says(shop, "b1", "张三", "发货和快递？")
    with FakeOpenAI() as fake:
        calls = [("c1", SEND, '{"text": "第一条：48小时内发货"}'), ("c2", SEND, '{"text": "第二条：默认中通"}')]
        fake.script.extend([Step(body=completion(None, calls)), Step(body=completion("好了"))])
        endpoint = OpenAISettings(base_url=fake.base_url, api_key="sk-test", model="fake-model")
        agent = settings.agent.model_copy(update={"provider": "openai", "openai": endpoint})
        # Phase 1: both replies are registered while the outbox queue is backed up.
        backed_up = make_app(settings.model_copy(update={"agent": agent}))
        ingest_and_agent = [queue_name("ingest", settings.shard), queue_name("agent", settings.shard)]
        with start_worker(
            backed_up, pool="solo", perform_ping_check=True, shutdown_timeout=30, queues=ingest_and_agent
        ):
            backed_up.send_task("kefu.ingest.page", args=[transport.page_of(shop, [message]).model_dump(mode="json")])
            wait_for(lambda: len(_requests(store)) == 2, 30, "both replies registered", lambda: stage_counts(store))
    first, second = _requests(store)

    # The broker hands the attempts over newest first.
    app = make_app(settings)
    outbox = queue_name("outbox", settings.shard)
    with app.connection_for_write() as conn:
        Queue(outbox)(conn.default_channel).purge()
    for request_id in (second, first):
        app.send_task("kefu.outbox.attempt", args=[request_id])
    with start_worker(app, pool="solo", perform_ping_check=True, shutdown_timeout=30):
        wait_for(
            lambda: len(platform.received(shop)) == 2 and is_quiet(store),
            30,
            "both replies",
            lambda: stage_counts(store),
        )
    assert [s.text for s in platform.received(shop)] == ["第一条：48小时内发货", "第二条：默认中通"]
    assert [s.client_ref for s in platform.received(shop)] == [first, second]
