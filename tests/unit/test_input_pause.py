"""Input pause (SPEC 3.11): pages are held whole, admission stops, in_flight() counts in-flight
work, resume gives the held pages back; host and account pauses never mix."""

from __future__ import annotations

import pytest

from runtime import pipeline
from runtime.admission.batches import evaluate
from runtime.errors import KefuError
from runtime.inbound.ingest import committed_cursor, ingest_page
from runtime.inbound.input_pause import (
    InputPaused,
    held_pages,
    hold_page,
    in_flight,
    pause_input,
    resume_input,
)
from runtime.inbound.pages import InboundPage
from tests.partial_ingest import commit_groups


def count(store, query: str) -> int:
    with store.read() as conn:
        return conn.execute(query).scalar_one()


def test_host_and_account_pauses_do_not_mix_and_both_are_idempotent(store, shop):
    assert pause_input(store).scope == "*"
    assert pause_input(store).scope == "*"
    with pytest.raises(KefuError) as conflict:
        pause_input(store, shop)
    assert conflict.value.code == "KEFU_INPUT_PAUSE_CONFLICT" and "the host" in conflict.value.message
    assert resume_input(store) == [] and resume_input(store) == []
    pause_input(store, shop)
    with pytest.raises(KefuError, match="account 'shop'"):
        pause_input(store)
    with pytest.raises(KefuError) as unknown:
        pause_input(store, "nobody")
    assert unknown.value.code == "KEFU_ACCOUNT_UNKNOWN"


def test_a_page_caught_midway_is_held_whole_and_ingested_once_after_resume(store, shop, transport, platform):
    said = [platform.buyer_says(shop, buyer, buyer, "在吗") for buyer in ("b1", "b2")]
    page = transport.page_of(shop, said)  # two conversation groups
    commit_groups(store, page, page.groups[:1])  # the first group got in before the pause
    pause_input(store, shop)
    with pytest.raises(InputPaused):
        ingest_page(store, page)
    hold_page(store, page)
    assert count(store, "SELECT count(*) FROM inbound_message") == 1
    assert committed_cursor(store, shop, transport.stream_id) is None
    assert in_flight(store, shop) == 0  # held pages are not in flight
    resumed = pipeline.resume(store, shop)
    [ingest, admit] = resumed.follow_ups
    # b1's message got in before the pause, and the pause kept it from admission: admit it now.
    assert isinstance(ingest, pipeline.Ingest) and isinstance(admit, pipeline.Admit)
    again = ingest.page
    result = ingest_page(store, InboundPage.model_validate(again))
    assert result.rows_written == 1 and committed_cursor(store, shop, transport.stream_id) == page.cursor
    assert count(store, "SELECT count(*) FROM inbound_message") == 2 and held_pages(store) == []


def test_a_page_whose_pause_was_lifted_before_it_was_held_is_not_held(store, shop, transport, platform):
    page = transport.page_of(shop, [platform.buyer_says(shop, "b1", "b1", "在吗")])
    pause_input(store, shop)
    with pytest.raises(InputPaused):
        ingest_page(store, page)
    assert pipeline.resume(store, shop).follow_ups == ()  # the resume came first: nothing was held yet
    assert hold_page(store, page) is False  # so the page is not held for a resume that is over
    assert held_pages(store) == []
    assert ingest_page(store, page).rows_written == 1


def test_admission_stops_while_paused_and_in_flight_counts_turns(store, shop, transport, platform):
    customer = ingest_page(store, transport.page_of(shop, [platform.buyer_says(shop, "b1", "张三", "在吗")]))
    customer_id = customer.customer_ids[0]
    pause_input(store)
    assert evaluate(store, customer_id, 1000).reason == "input-paused"
    assert in_flight(store) == 0
    resume_input(store)
    evaluate(store, customer_id, 1000)  # a batch whose turn has not run yet
    pause_input(store)
    assert in_flight(store) == 1
    with store.write() as conn:
        conn.execute("UPDATE admission_batch SET state = 'done'")
    assert in_flight(store) == 0


def test_a_moves_pause_is_the_moves_to_lift(store, shop):
    from runtime.inbound.input_pause import input_pauses
    from runtime.placement.shards import Placement, record_placement
    from runtime.store.states import PlacementState

    pause_input(store, shop)
    with store.write() as conn:  # what a move's stop does on its source
        record_placement(conn, Placement(account_id=shop, shard="default", state=PlacementState.MOVING))
    assert [(p.scope, p.by_move) for p in input_pauses(store)] == [(shop, True)]
    with pytest.raises(KefuError) as refused:
        resume_input(store, shop)
    assert refused.value.code == "KEFU_INPUT_PAUSE_HELD_BY_MOVE"
    assert count(store, "SELECT count(*) FROM input_pause") == 1  # still paused: nothing is taken in
    with store.write() as conn:  # the move resumes it once the account is served here again
        record_placement(conn, Placement(account_id=shop, shard="default", generation=2))
    resume_input(store, shop)
    assert input_pauses(store) == []
