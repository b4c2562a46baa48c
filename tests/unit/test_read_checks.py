"""Read-status checks: a few per sent 1:1 message at a fixed interval, ending at the first read."""

from __future__ import annotations

from runtime.outbox.manual import ManualSend, send_manual
from runtime.outbox.read_checks import checked, due_read_checks, schedule_read_checks
from runtime.outbox.requests import begin_attempt, record_sent
from runtime.ports import SendReceipt


def sent_request(store, shop, transport, platform, request_id: str) -> None:
    from runtime.inbound.ingest import ingest_page

    page = transport.page_of(shop, [platform.buyer_says(shop, "b1", "张三", "在吗")])
    customer = ingest_page(store, page).customer_ids[0]
    send_manual(store, ManualSend(request_id=request_id, customer_id=customer, text="您好"))
    grant = begin_attempt(store, request_id, "w", 60)
    record_sent(store, request_id, grant.attempt_no, SendReceipt(platform_message_id=f"pqk-{request_id}"))


def test_checks_are_bounded_and_end_at_the_first_read(store, shop, transport, platform):
    sent_request(store, shop, transport, platform, "m1")
    schedule_read_checks(store, "m1", checks=3, interval_ms=1000, now=0)
    schedule_read_checks(store, "m1", checks=3, interval_ms=1000, now=500)  # idempotent
    assert due_read_checks(store, now=999) == []
    asked = []
    now = 1000
    while due := due_read_checks(store, now=now):
        [check] = due
        assert (check.recipient_id, check.platform_message_id) == ("b1", "pqk-m1")
        asked.append(now)
        checked(store, "m1", False, 1000, now)
        now += 1000
    assert asked == [1000, 2000, 3000]  # three checks, then the schedule is gone
    assert due_read_checks(store, now=10**12) == []

    sent_request(store, shop, transport, platform, "m2")
    schedule_read_checks(store, "m2", checks=3, interval_ms=1000, now=0)
    checked(store, "m2", True, 1000, 1000)  # read at the first check
    assert due_read_checks(store, now=10**12) == []
