"""An observing route on a real worker (issue 42 item 2): a shop lets kefu listen before going
live. What buyers write is stored and listed and never answered, imported history neither; once
the route answers, a new message is answered and the old ones never are."""

from __future__ import annotations

import json

import celery.contrib.testing.tasks  # noqa: F401  (registers celery.ping for start_worker)
import pytest
from celery.contrib.testing.worker import start_worker

from runtime.admission.batches import evaluate
from runtime.admission.routes import RouteChanges, update_route
from runtime.customers.summaries import list_customers
from runtime.customers.transcript import transcript
from runtime.inbound.history_import import check_against_store, parse_file, run_import
from runtime.operators.status import is_quiet, stage_counts
from tests.integration.helpers import wait_for
from worker.celery_app import make_app


def _states(store) -> list[tuple[str, str]]:
    with store.read() as conn:
        return sorted(conn.execute("SELECT body, state FROM inbound_message").all())


@pytest.mark.parametrize("broker_url", ["redis"], indirect=True)
def test_observed_messages_are_kept_unanswered_and_only_new_ones_are_answered_after_the_switch(
    settings, store, shop, platform, transport, tmp_path
):
    update_route(store, "all-direct", 1, RouteChanges(mode="observe"), "op-observe")
    # Earlier chats of buyer b2, imported while the route observes.
    history = tmp_path / "earlier.jsonl"
    earlier = {"conversation_id": platform.conversation_for("b2"), "conversation_type": "direct", "role": "buyer"}
    earlier |= {"sender_id": "b2", "sender_name": "买家b2", "occurred_at": "2025-10-01T10:00:00+08:00"}
    history.write_text(json.dumps({**earlier, "text": "上次的快递什么时候到"}, ensure_ascii=False) + "\n")
    parsed = parse_file(history, history.read_bytes(), "jsonl", "shop")
    check_against_store(store, parsed)
    assert run_import(store, parsed, None, 30).imported == 1

    app = make_app(settings)
    with start_worker(app, pool="solo", perform_ping_check=True, shutdown_timeout=30):
        said = [platform.buyer_says("shop", b, f"买家{b}", "什么时候发货") for b in ("b1", "b2")]
        for message in said:
            app.send_task("kefu.ingest.page", args=[transport.page_of("shop", [message]).model_dump(mode="json")])
        wait_for(
            lambda: [state for _, state in _states(store)].count("observed") == 2 and is_quiet(store),
            30,
            "both messages to be stored as observed",
            lambda: (_states(store), stage_counts(store)),
        )
        assert platform.received("shop") == []
        with store.read() as conn:
            assert conn.execute("SELECT count(*) FROM admission_batch").scalar_one() == 0
        # Listed and readable like any conversation.
        listed = {c.conversation_id: c for c in list_customers(store, "simulation", account_id="shop")}
        assert set(listed) == {m.conversation_id for m in said}
        assert {c.preview for c in listed.values()} == {"什么时候发货"}
        b2 = listed[said[1].conversation_id].id
        lines = [(line.speaker, line.text) for line in transcript(store, b2).lines]
        assert lines == [("buyer", "上次的快递什么时候到"), ("buyer", "什么时候发货")]

        # The shop goes live: only what comes now is answered.
        update_route(store, "all-direct", 2, RouteChanges(mode="answer"), "op-answer")
        new = platform.buyer_says("shop", "b1", "买家b1", "可以开发票吗")
        app.send_task("kefu.ingest.page", args=[transport.page_of("shop", [new]).model_dump(mode="json")])
        wait_for(
            lambda: len(platform.received("shop")) == 1 and is_quiet(store),
            30,
            "the reply to b1's new message",
            lambda: (_states(store), stage_counts(store)),
        )
        assert evaluate(store, b2, 1000).reason == "nothing-pending"  # b2's backlog waits for nothing
    replies = [(s.recipient_id, s.text) for s in platform.received("shop")]
    assert len(replies) == 1 and replies[0][0] == "b1"
    assert "发票" in replies[0][1] and "发货" not in replies[0][1]
    assert _states(store) == sorted(
        [
            ("上次的快递什么时候到", "history"),
            ("什么时候发货", "observed"),
            ("什么时候发货", "observed"),
            ("可以开发票吗", "committed"),
        ]
    )
