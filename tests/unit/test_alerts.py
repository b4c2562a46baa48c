"""Alerts for humans: raised with the change that calls for one, delivered in order, at least once."""

from __future__ import annotations

import json

import httpx
import pytest

from runtime.accounts.listener_policy import ListenerPolicy, record_listener_state
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.handling import pause_handling
from runtime.admission.routes import RouteSpec, create_route
from runtime.inbound.ingest import ingest_page
from runtime.operators.alerts import Alert, AlertKind, SinkAnswer, backlog, deliver_alerts, raise_alert, undelivered
from runtime.outbox.manual import ManualSend, send_manual
from runtime.outbox.requests import begin_attempt, confirm_result, record_failure, settle_by_receipt
from runtime.ports import NeverReceived, SendFailure
from runtime.store import leases
from worker.alert_sinks import WebhookSink


def raised(store) -> list[tuple[str, int | None, str | None, str | None]]:
    return [(a.kind, a.customer_id, a.request_id, a.code) for a in undelivered(store)]


def customer_of(store, platform, transport, buyer: str) -> int:
    said = platform.buyer_says("shop", buyer, buyer, "在吗")
    [customer] = ingest_page(store, transport.page_of("shop", [said])).customer_ids
    return customer


def failed_send(store, customer: int, request_id: str, kind: str) -> None:
    send_manual(store, ManualSend(request_id=request_id, customer_id=customer, text="在的"))
    grant = begin_attempt(store, request_id, "w", 60)
    record_failure(store, request_id, grant.attempt_no, SendFailure(kind, "TIMEOUT"))  # type: ignore[arg-type]


def test_the_agents_handoff_raises_an_alert_and_an_operator_taking_over_none(store, shop, platform, transport):
    handed, taken = customer_of(store, platform, transport, "b1"), customer_of(store, platform, transport, "b2")
    pause_handling(store, handed, "handoff: 顾客要求退款", handoff=True)
    pause_handling(store, handed, "handoff: again", handoff=True)  # already paused: nothing changes, nothing raised
    pause_handling(store, taken, "handoff: typed by an operator (by alice)")  # words do not make a handoff
    assert raised(store) == [("handoff", handed, None, "handoff")]
    assert [a.simulated for a in undelivered(store)] == [True]  # the simulator's account: kept apart


def test_a_send_ending_failed_or_unknown_raises_one_alert_and_settling_it_by_hand_none(
    store, shop, platform, transport
):
    customer = customer_of(store, platform, transport, "b1")
    failed_send(store, customer, "op-1", "unknown")
    failed_send(store, customer, "op-2", "rejected")
    confirm_result(store, "op-1", delivered=False)  # the operator's own word needs no alert
    assert raised(store) == [
        ("send-unknown", customer, "op-1", "TIMEOUT"),
        ("send-failed", customer, "op-2", "TIMEOUT"),
    ]


def test_a_send_unknown_again_after_a_receipt_query_sent_it_back_is_the_same_news(store, shop, platform, transport):
    customer = customer_of(store, platform, transport, "b1")
    failed_send(store, customer, "op-1", "unknown")
    assert settle_by_receipt(store, "op-1", NeverReceived(), attempt_lease_s=0)  # not there: back to pending
    grant = begin_attempt(store, "op-1", "w", 60)
    record_failure(store, "op-1", grant.attempt_no, SendFailure("unknown", "TIMEOUT"))
    assert raised(store) == [("send-unknown", customer, "op-1", "TIMEOUT")]


def test_a_send_refused_before_it_was_stored_raises_an_alert(store):
    """A Wangwang conversation the seller opened: no buyer to send to yet (runtime.outbox.recipients)."""
    from runtime.inbound.pages import parse_page
    from tests.unit.test_media_and_recipients import message, wangwang_page

    create_account(store, AccountSpec(id="ww", platform="wangwang", identity="seller-ww"))
    create_route(store, RouteSpec(id="ww-all", account_id="ww", conversation_type="direct"), op_id="op-ww")
    opened = parse_page(wangwang_page("p1", [message("m1", "seller", "native_operator")]))
    [customer] = ingest_page(store, opened).customer_ids
    send_manual(store, ManualSend(request_id="ww-1", customer_id=customer, text="在吗"))
    send_manual(store, ManualSend(request_id="ww-1", customer_id=customer, text="在吗"))  # replayed: stored once
    assert raised(store) == [("send-failed", customer, "ww-1", "WANGWANG_DIRECT_RECIPIENT_UNAVAILABLE")]


def test_a_failed_listener_raises_an_alert_once(store, shop, settings):
    create_account(store, AccountSpec(id="ding", platform="dingtalk", identity="robot-1"))
    policy = ListenerPolicy(settings.listener)
    policy.start()
    policy.failed(0, "KEFU_DINGTALK_AUTH_REFUSED", authorization=True)
    for _ in range(2):
        with store.write() as conn:
            record_listener_state(conn, "ding", policy)
    assert raised(store) == [("listener-failed", None, None, "KEFU_DINGTALK_AUTH_REFUSED")]
    assert [a.simulated for a in undelivered(store)] == [False]


class Webhook:
    """A sink answering from a script, then `delivered`; keeps what it was given."""

    def __init__(self, *answers: SinkAnswer) -> None:
        self.answers, self.got = list(answers), []

    def send(self, alert: Alert) -> SinkAnswer:
        self.got.append(alert.key)
        return self.answers.pop(0) if self.answers else SinkAnswer(outcome="delivered")


DOWN = SinkAnswer(outcome="retry", failure="KEFU_ALERT_WEBHOOK_HTTP: 503 Service Unavailable")
BAD = SinkAnswer(outcome="refused", failure="KEFU_ALERT_WEBHOOK_HTTP: 400 Bad Request")


def handoffs(store, platform, transport, n: int) -> list[str]:
    for buyer in range(n):
        pause_handling(store, customer_of(store, platform, transport, f"b{buyer}"), "handoff: x", handoff=True)
    return [a.key for a in undelivered(store)]


def test_alerts_go_out_in_order_and_a_failed_round_is_tried_again(store, shop, platform, transport):
    keys = handoffs(store, platform, transport, 3)
    sink = Webhook(DOWN)
    assert deliver_alerts(store, sink) == 0 and sink.got == keys[:1]  # stops at the first failure: order kept
    assert backlog(store).model_dump() == {"raised": 3, "refused": 0, "last_failure": DOWN.failure}
    assert [a.attempts for a in undelivered(store)] == [1, 0, 0]
    assert deliver_alerts(store, sink) == 3 and sink.got == keys[:1] + keys and backlog(store).raised == 0
    assert deliver_alerts(store, sink) == 0 and len(sink.got) == 4  # each delivered once


def test_an_alert_refused_for_good_does_not_hold_up_the_rest(store, shop, platform, transport):
    keys = handoffs(store, platform, transport, 2)
    sink = Webhook(BAD)
    assert deliver_alerts(store, sink) == 1 and sink.got == keys
    assert backlog(store).model_dump() == {"raised": 0, "refused": 1, "last_failure": None}


def test_one_round_at_a_time(store, shop, platform, transport):
    handoffs(store, platform, transport, 1)
    sink = Webhook()
    with leases.held(store, "alerts", 60) as round_running:
        assert round_running is not None
        assert deliver_alerts(store, sink) == 0 and sink.got == []  # that round delivers them
    assert deliver_alerts(store, sink) == 1


def test_keys_are_random_not_the_row_id_which_a_restored_backup_would_give_again(store, shop, platform, transport):
    made = handoffs(store, platform, transport, 2)
    assert len(set(made)) == 2 and all(len(key) == 24 and not key.isdigit() for key in made)


def webhook_answering(status: int, seen: list[httpx.Request]) -> WebhookSink:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status)

    return WebhookSink("https://ops.example/alerts", 5, "default", False, httpx.MockTransport(answer))


@pytest.mark.parametrize(
    ("status", "outcome"), [(204, "delivered"), (400, "refused"), (429, "retry"), (408, "retry"), (503, "retry")]
)
def test_the_webhook_refuses_for_good_only_on_a_client_error_it_will_repeat(store, shop, status, outcome):
    create_account(store, AccountSpec(id="ding", platform="dingtalk", identity="robot-1"))
    with store.write() as conn:
        raise_alert(conn, AlertKind.LISTENER_FAILED, "ding", code="KEFU_DINGTALK_AUTH_REFUSED")
    [alert] = undelivered(store)
    seen: list[httpx.Request] = []
    answer = webhook_answering(status, seen).send(alert)
    assert answer.outcome == outcome and (answer.failure is None) == (status == 204)
    [request] = seen
    assert request.headers["Idempotency-Key"] == alert.key and json.loads(request.content)["kind"] == "listener-failed"


def test_a_simulated_accounts_alerts_stay_in_the_log_unless_asked_for(store, shop, platform, transport):
    handoffs(store, platform, transport, 1)
    [alert] = undelivered(store)
    seen: list[httpx.Request] = []
    assert webhook_answering(204, seen).send(alert).outcome == "delivered" and seen == []  # logged, not POSTed
