"""A human takes over while replies wait in the outbox queue: nothing automatic reaches that buyer."""

from __future__ import annotations

import celery.contrib.testing.tasks  # noqa: F401  (registers celery.ping for start_worker)
from celery.contrib.testing.worker import start_worker

from runtime.admission.handling import pause_handling, resume_handling
from runtime.operators.status import is_quiet, stage_counts
from tests.integration.helpers import wait_for
from worker.celery_app import make_app, queue_name


def _outbox(store) -> dict[str, tuple[int, str]]:
    """conversation id -> (customer id, request state)"""
    with store.read() as conn:
        rows = conn.execute(
            "SELECT c.conversation_id, c.id, o.state FROM outbox_request o JOIN customer c ON c.id = o.customer_id"
        ).all()
    return {conversation: (customer, state) for conversation, customer, state in rows}


def test_pause_revokes_a_registered_reply_and_resume_admits_only_new_input(settings, store, shop, platform, transport):
    said = {b: platform.buyer_says(shop, b, f"买家{b}", "什么时候发货") for b in ("b1", "b2")}
    # Phase 1: the platform throttles (each turn's own attempt is not submitted) and the outbox
    # queue, where the retries go, is backed up (no worker consumes it): both replies wait registered.
    throttled = settings.model_copy(
        update={"simulator": settings.simulator.model_copy(update={"send_throttled": True})}
    )
    only_ingest_and_agent = [queue_name("ingest", settings.shard), queue_name("agent", settings.shard)]
    backed_up = make_app(throttled)  # a worker's queue selection sticks to its app: one app per phase
    with start_worker(
        backed_up, pool="solo", perform_ping_check=True, shutdown_timeout=30, queues=only_ingest_and_agent
    ):
        for message in said.values():
            backed_up.send_task("kefu.ingest.page", args=[transport.page_of(shop, [message]).model_dump(mode="json")])
        wait_for(  # each refused once by the platform, and pending its next attempt
            lambda: [state for _, state in _outbox(store).values()] == ["pending", "pending"],
            30,
            "both replies to be registered",
            lambda: stage_counts(store),
        )
    paused_customer = _outbox(store)[said["b2"].conversation_id][0]
    pause_handling(store, paused_customer, "operator took over")

    # Phase 2: the outbox drains. b1's reply goes out; b2's was revoked and is never attempted.
    app = make_app(settings)
    with start_worker(app, pool="solo", perform_ping_check=True, shutdown_timeout=30):
        wait_for(
            lambda: len(platform.received(shop)) == 1 and is_quiet(store), 30, "b1's reply", lambda: stage_counts(store)
        )
        assert {c: state for c, (_, state) in _outbox(store).items()} == {
            said["b1"].conversation_id: "sent",
            said["b2"].conversation_id: "revoked",
        }
        assert [s.recipient_id for s in platform.received(shop)] == ["b1"]

        # Phase 3: after resume only new input is admitted and answered.
        resume_handling(store, paused_customer)
        new = platform.buyer_says(shop, "b2", "买家b2", "可以开发票吗")
        app.send_task("kefu.ingest.page", args=[transport.page_of(shop, [new]).model_dump(mode="json")])
        wait_for(lambda: len(platform.received(shop)) == 2 and is_quiet(store), 30, "the reply to b2's new message")
    replies = [(s.recipient_id, s.text) for s in platform.received(shop)]
    assert replies[1][0] == "b2" and "发票" in replies[1][1] and "发货" not in replies[1][1]
    with store.read() as conn:
        b2_states = (
            conn.execute(
                "SELECT state FROM inbound_message WHERE conversation_id = ? ORDER BY id", (said["b2"].conversation_id,)
            )
            .scalars()
            .all()
        )
    assert b2_states == ["committed", "committed"]  # the first was in the log before the pause
