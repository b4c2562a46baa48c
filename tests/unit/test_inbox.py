"""Received pages (SPEC 3.3): kept until ingested, published again when their broker message is
lost, and the committed cursor follows the receive order: never backwards, never past a page
that was not committed."""

from __future__ import annotations

import pytest

from runtime.errors import PageRejected
from runtime.inbound.inbox import overdue_pages, prune_ingested, record_received, refuse_page
from runtime.inbound.ingest import committed_cursor, ingest_page
from runtime.inbound.pages import parse_page
from tests.unit.test_ingest import group, message, page_dict


def page(op: str, cursor: str, pmid: str, conversation: str = "conv-1"):
    return parse_page(page_dict(op=op, cursor=cursor, groups=[group(conversation, [message(pmid)])]))


def pending(store) -> int:
    with store.read() as conn:
        return conn.execute("SELECT count(*) FROM received_page WHERE ingested_at IS NULL").scalar_one()


def test_a_received_page_whose_broker_message_is_lost_is_published_again_until_ingested(store, shop):
    lost = page("p1", "c1", "m1")
    assert record_received(store, lost) is True
    assert [p["page_op_id"] for p in overdue_pages(store, grace_ms=0)] == ["p1"]
    ingest_page(store, parse_page(overdue_pages(store, grace_ms=-10_000)[0]))  # the republished copy
    assert pending(store) == 0
    assert overdue_pages(store, grace_ms=-10_000) == []
    # The platform redelivers it (our ACK was lost): the receiver only ACKs, nothing is published.
    assert record_received(store, lost) is False


def test_a_checkpoint_counts_received_messages_not_yet_ingested_as_pending_input(store, shop):
    from runtime.inbound.checkpoints import compute_report

    two = parse_page(page_dict(op="p1", groups=[group("conv-1", [message("m1"), message("m2")])]))
    record_received(store, two)
    with store.read() as conn:
        assert compute_report(conn, shop, 1).pending.input == 2
    ingest_page(store, two)
    with store.read() as conn:  # now stored and waiting for admission: still two, never four
        assert compute_report(conn, shop, 1).pending.input == 2


def test_a_redelivered_page_still_pending_is_published_again_at_once(store, shop):
    first = page("p1", "c1", "m1")
    assert record_received(store, first) is True
    assert record_received(store, first) is True  # its first broker message may be the lost one
    with store.read() as conn:
        assert conn.execute("SELECT count(*), max(publishes) FROM received_page").one() == (1, 2)


def test_republishing_backs_off_so_a_broker_backlog_is_not_multiplied(store, shop):
    record_received(store, page("p1", "c1", "m1"))
    with store.write() as conn:  # published three times already, the last one 3 graces ago
        conn.execute("UPDATE received_page SET publishes = 3, published_at = published_at - 3000")
    assert overdue_pages(store, grace_ms=1000) == []  # the third publish waits 4 graces
    with store.write() as conn:
        conn.execute("UPDATE received_page SET published_at = published_at - 2000")
    assert len(overdue_pages(store, grace_ms=1000)) == 1


def test_the_cursor_never_passes_a_page_that_was_not_committed(store, shop):
    pages = [page(f"p{n}", f"c{n}", f"m{n}") for n in (1, 2, 3)]
    for received in pages:
        record_received(store, received)
    ingest_page(store, pages[1])
    ingest_page(store, pages[2])
    assert committed_cursor(store, shop, "s") is None  # p1 (received first) is not committed
    ingest_page(store, pages[0])
    assert committed_cursor(store, shop, "s") == "c3"


def test_a_stale_copy_of_an_old_page_after_its_record_is_forgotten_never_moves_the_cursor_back(store, shop):
    for received in (page("p1", "c1", "m1"), page("p2", "c2", "m2")):
        record_received(store, received)
        ingest_page(store, received)
    prune_ingested(store, keep_ms=-1000)
    newer = page("p3", "c3", "m3")
    record_received(store, newer)
    ingest_page(store, page("p1", "c1", "m1"))  # a broker copy restored after the visibility timeout
    ingest_page(store, newer)
    assert committed_cursor(store, shop, "s") == "c3"


def test_a_catch_up_page_fetched_before_the_cursor_moved_is_not_recorded(store, shop):
    listened = page("p5", "c5", "m5")
    record_received(store, listened)
    ingest_page(store, listened)
    stale = page("p2-4", "c4", "m2")  # fetched after the cursor as it was before p5 committed
    assert record_received(store, stale, fetched_after=None) is False
    assert record_received(store, page("p6", "c6", "m6"), fetched_after="c5") is True
    assert committed_cursor(store, shop, "s") == "c5"


def test_republishing_waits_at_most_32_graces_however_often_a_page_was_published(store, shop):
    record_received(store, page("p1", "c1", "m1"))
    with store.write() as conn:
        conn.execute("UPDATE received_page SET publishes = 70, published_at = published_at - 31000")
    assert overdue_pages(store, grace_ms=1000) == []
    with store.write() as conn:
        conn.execute("UPDATE received_page SET published_at = published_at - 1000")
    assert len(overdue_pages(store, grace_ms=1000)) == 1


def test_a_late_replay_of_an_old_page_never_moves_the_cursor_back(store, shop):
    old, new = page("p1", "c1", "m1"), page("p2", "c2", "m2")
    for received in (old, new):
        record_received(store, received)
        ingest_page(store, received)
    assert committed_cursor(store, shop, "s") == "c2"
    ingest_page(store, old)
    assert committed_cursor(store, shop, "s") == "c2"
    # Even after its record is gone, a replay of the old page is a replay.
    prune_ingested(store, keep_ms=-1000)
    ingest_page(store, old)
    assert committed_cursor(store, shop, "s") == "c2"


def test_a_page_that_can_never_be_ingested_is_not_published_again(store, shop):
    gone = parse_page(page_dict(account="deleted-shop", op="p9"))
    record_received(store, gone)
    refuse_page(store, "deleted-shop", "s", "p9", "KEFU_ACCOUNT_UNKNOWN")
    assert overdue_pages(store, grace_ms=-10_000) == []
    with store.read() as conn:
        assert conn.execute("SELECT outcome FROM received_page").scalar_one() == "KEFU_ACCOUNT_UNKNOWN"


def test_pages_held_by_an_input_pause_wait_for_the_resume(store, shop):
    from runtime.inbound.input_pause import pause_input, resume_input

    record_received(store, page("p1", "c1", "m1"))
    pause_input(store, shop)
    assert overdue_pages(store, grace_ms=-10_000) == []
    resume_input(store, shop)
    assert len(overdue_pages(store, grace_ms=-10_000)) == 1


def test_one_message_id_with_two_contents_rejects_the_page_whole(store, shop):
    twice = page_dict(groups=[group("conv-1", [message("m1", text="在吗"), message("m1", text="退货")])])
    with pytest.raises(PageRejected) as rejected:
        parse_page(twice)
    assert rejected.value.problems == [
        "groups.0: messages.1.platform_message_id: repeats an earlier message with other content"
    ]
    repeated = parse_page(page_dict(groups=[group("conv-1", [message("m1"), message("m1")])]))
    assert ingest_page(store, repeated).rows_written == 1
