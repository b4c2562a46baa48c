"""Alerts for humans: raised with the change that calls for one, delivered in order, at least once."""

from __future__ import annotations

from runtime.alerts import Alert, backlog, undelivered
from runtime.handling import pause_handling
from runtime.ingest import ingest_page
from runtime.listener_policy import ListenerPolicy, record_listener_state
from runtime.manual import ManualSend, send_manual
from runtime.outbox import begin_attempt, confirm_result, record_failure
from runtime.ports import SendFailure
from worker.alert_sinks import deliver_alerts


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


def test_a_handoff_raises_an_alert_and_an_operator_taking_over_does_not(store, shop, platform, transport):
    handed, taken = customer_of(store, platform, transport, "b1"), customer_of(store, platform, transport, "b2")
    pause_handling(store, handed, "handoff: 顾客要求退款")
    pause_handling(store, handed, "handoff: again")  # already paused: nothing changes, nothing raised
    pause_handling(store, taken, "VIP (by alice)")
    assert raised(store) == [("handoff", handed, None, "handoff")]


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


def test_a_failed_listener_raises_an_alert_once(store, shop, settings):
    policy = ListenerPolicy(settings.listener)
    policy.start()
    policy.failed(0, "KEFU_DINGTALK_AUTH_REFUSED", authorization=True)
    for _ in range(2):
        with store.write() as conn:
            record_listener_state(conn, shop, policy)
    assert raised(store) == [("listener-failed", None, None, "KEFU_DINGTALK_AUTH_REFUSED")]


class FlakySink:
    """A webhook that is down for its first `down` calls."""

    def __init__(self, down: int) -> None:
        self.down, self.got = down, []

    def send(self, shard: str, alert: Alert) -> str | None:
        if self.down:
            self.down -= 1
            return "KEFU_ALERT_WEBHOOK_HTTP: 503 Service Unavailable"
        self.got.append(f"{shard}:{alert.id}")
        return None


def test_alerts_are_delivered_in_order_and_a_failed_round_is_tried_again(store, shop, platform, transport):
    for buyer in ("b1", "b2", "b3"):
        pause_handling(store, customer_of(store, platform, transport, buyer), "handoff: x")
    sink = FlakySink(down=1)
    assert deliver_alerts(store, sink, "default") == 0  # stops at the first failure: order is kept
    assert backlog(store).model_dump() == {
        "undelivered": 3,
        "last_failure": "KEFU_ALERT_WEBHOOK_HTTP: 503 Service Unavailable",
    }
    assert [a.attempts for a in undelivered(store)] == [1, 0, 0]
    assert deliver_alerts(store, sink, "default") == 3
    assert sink.got == ["default:1", "default:2", "default:3"] and backlog(store).undelivered == 0
    assert deliver_alerts(store, sink, "default") == 0 and len(sink.got) == 3  # each once
