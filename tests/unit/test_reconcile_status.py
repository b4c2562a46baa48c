"""What the reconciler re-enqueues, and what `kefu status` counts, straight from SQLite."""

from __future__ import annotations

import time

from runtime import pipeline
from runtime.admission.batches import evaluate
from runtime.inbound.ingest import ingest_page
from runtime.operators.status import is_quiet, stage_counts
from runtime.outbox.requests import begin_attempt, register_outbound
from runtime.pipeline import Admit, Attempt, RunTurn, Settle
from runtime.store.clock import clock_at, now_ms
from runtime.store.tables import OutboundIntent
from tests.local_services import Local


def test_overdue_work_of_every_stage_is_found(settings, store, shop, platform, transport):
    ids = []
    for buyer in ("b1", "b2"):
        ids += ingest_page(
            store, transport.page_of(shop, [platform.buyer_says(shop, buyer, buyer, "你好")])
        ).customer_ids
    # too young: left to its own task
    assert pipeline.reconcile(Local(settings, store)).follow_ups == ()
    evaluate(store, ids[0], 1000)  # b1: claimed into a batch, its turn never ran
    with store.write() as conn:
        for request_id in ("r-sending", "r-pending", "r-unknown"):  # registration order
            register_outbound(
                conn,
                OutboundIntent(
                    request_id=request_id,
                    customer_id=ids[1],
                    account_id=shop,
                    conversation_id="c",
                    recipient_id="b2",
                    origin="manual",
                    body=request_id,
                ),
            )
        conn.execute("UPDATE outbox_request SET state = 'result-unknown' WHERE request_id = 'r-unknown'")
    begin_attempt(store, "r-sending", "dead-worker", lease_s=60)
    quick = settings.model_copy(
        update={
            "reconcile": settings.reconcile.model_copy(update={"grace_s": 0.01}),
            "outbox": settings.outbox.model_copy(update={"attempt_lease_s": 0.01}),
        }
    )
    with clock_at(now_ms() + 50):  # past the grace and the attempt's lease
        work = pipeline.reconcile(Local(quick, store)).follow_ups
    assert [w for w in work if isinstance(w, Admit)] == [Admit(ids[1])]
    assert [w for w in work if isinstance(w, RunTurn)] == [RunTurn(ids[0])]
    assert sorted(w.request_id for w in work if isinstance(w, Attempt)) == ["r-pending", "r-sending"]
    assert [w for w in work if isinstance(w, Settle)] == [Settle("r-unknown")]
    assert not is_quiet(store)
    counts = {stage.stage: stage.counts for stage in stage_counts(store)}
    assert counts["inbound messages"] == {"claimed": 1, "pending": 1}
    assert counts["admission batches"] == {"claimed": 1}
    assert counts["outbox requests"] == {"pending": 1, "sending": 1, "result-unknown": 1}
    assert counts["provider streams"] == {"committed pages": 2}


def test_an_empty_store_is_quiet(settings, store):
    assert is_quiet(store)
    assert pipeline.reconcile(Local(settings, store)).follow_ups == ()


def test_customers_waiting_are_handed_out_a_limit_at_a_time_round_the_backlog(
    settings, store, shop, platform, transport
):
    from runtime.admission.batches import customers_waiting
    from runtime.store import queries

    ids = []
    for buyer in ("b1", "b2", "b3", "b4", "b5"):
        said = [platform.buyer_says(shop, buyer, buyer, text) for text in ("你好", "在吗", "发货了吗")]
        ids += ingest_page(store, transport.page_of(shop, said)).customer_ids
    evaluate(store, ids[0], 1000)  # b1's input claimed: it waits no more
    with store.write() as conn:  # b2's lines are recent: within the grace
        conn.execute(f"UPDATE inbound_message SET received_at = 9999999999999 WHERE customer_id = {ids[1]}")
    overdue = ids[2:]
    with store.read() as conn:
        now = int(time.time() * 1000) + 1
        assert customers_waiting(conn, now, 10) == overdue  # each once, however many lines wait
        assert customers_waiting(conn, now, 2) == overdue[:2]
        assert customers_waiting(conn, now, 2, after=overdue[1]) == [overdue[2], overdue[0]]  # round to the start
        assert customers_waiting(conn, now, 10, after=overdue[2]) == overdue
        params = {"after": 0, "until": 2**63 - 1, "t": now, "n": 10}
        overdue_sql = queries.inbound_message.OVERDUE_CUSTOMERS
        plan = " ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {overdue_sql}", params))
    assert "SCAN inbound_message" not in plan  # index probes, never a scan of the pending rows
