"""Read-status checks (SPEC 3.9): one per sent 1:1 message, marked made before it is made."""

from __future__ import annotations

import threading

from runtime.outbox.manual import ManualSend, send_manual
from runtime.outbox.read_checks import claim_due_read_check, schedule_read_checks
from runtime.outbox.requests import begin_attempt, record_sent
from runtime.ports import SendReceipt


def sent_request(store, shop, transport, platform, request_id: str, buyer: str = "b1") -> None:
    from runtime.inbound.ingest import ingest_page

    page = transport.page_of(shop, [platform.buyer_says(shop, buyer, "张三", "在吗")])
    customer = ingest_page(store, page).customer_ids[0]
    send_manual(store, ManualSend(request_id=request_id, customer_id=customer, text="您好"))
    grant = begin_attempt(store, request_id, "w", 60)
    record_sent(store, request_id, grant.attempt_no, SendReceipt(platform_message_id=f"pqk-{request_id}"))


def test_a_message_has_one_check_and_it_is_claimed_once(store, shop, transport, platform):
    sent_request(store, shop, transport, platform, "m1")
    schedule_read_checks(store, "m1", checks=1, delay_ms=1000, now=0)
    schedule_read_checks(store, "m1", checks=1, delay_ms=1000, now=500)  # idempotent
    assert claim_due_read_check(store, now=999) is None  # not due yet
    check = claim_due_read_check(store, now=1000)
    assert check is not None and (check.recipient_id, check.platform_message_id) == ("b1", "pqk-m1")
    assert claim_due_read_check(store, now=10**12) is None  # made: never again
    schedule_read_checks(store, "m1", checks=1, delay_ms=1000, now=10**12)  # a send step run again
    assert claim_due_read_check(store, now=10**13) is None
    with store.read() as conn:
        assert conn.execute("SELECT queried_at FROM read_check WHERE request_id = 'm1'").scalar_one() == 1000


def test_no_check_when_queries_are_off(store, shop, transport, platform):
    sent_request(store, shop, transport, platform, "m2")
    schedule_read_checks(store, "m2", checks=0, delay_ms=1000, now=0)
    assert claim_due_read_check(store, now=10**12) is None


def test_overlapping_rounds_never_claim_the_same_check_twice(store, shop, transport, platform):
    for n in range(20):
        sent_request(store, shop, transport, platform, f"m{n}", buyer=f"b{n}")
        schedule_read_checks(store, f"m{n}", checks=1, delay_ms=0, now=0)
    claimed: list[str] = []

    def round_() -> None:
        while (check := claim_due_read_check(store, now=1)) is not None:
            claimed.append(check.request_id)

    rounds = [threading.Thread(target=round_) for _ in range(4)]
    for thread in rounds:
        thread.start()
    for thread in rounds:
        thread.join(30)
    assert sorted(claimed) == sorted(f"m{n}" for n in range(20))  # each once, none lost
