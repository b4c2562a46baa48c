"""Outbox (SPEC 3.8): intent before any platform call, exactly one attempt per request id."""

from __future__ import annotations

import pytest

from runtime.admission.routes import RouteSpec, create_route
from runtime.outbox.requests import (
    AttemptGrant,
    AttemptSkipped,
    begin_attempt,
    load_request,
    next_pending,
    record_failure,
    record_sent,
    register_outbound,
    settle_by_receipt,
)
from runtime.ports import NeverReceived, SendFailure, SendReceipt
from runtime.store.clock import clock_at, now_ms
from runtime.store.tables import OutboundIntent


def intent(request_id: str, origin: str, body: str, **frozen: object) -> OutboundIntent:
    return OutboundIntent(
        request_id=request_id,
        customer_id=1,
        account_id="shop",
        conversation_id="c",
        recipient_id="b1",
        origin=origin,
        body=body,
        **frozen,
    )


@pytest.fixture
def customer(store, shop) -> None:
    with store.write() as conn:
        conn.execute(
            "INSERT INTO customer (account_id, conversation_id, conversation_type, last_activity_at)"
            " VALUES ('shop', 'c', 'direct', 0)"
        )
        conn.execute(
            "INSERT INTO admission_batch (id, customer_id, handling_epoch, route_id, route_generation, message_count,"
            " created_at, updated_at) VALUES ('b1', 1, 0, 'all-direct', 1, 1, 0, 0)"
        )


@pytest.fixture
def request_id(store, customer) -> str:
    with store.write() as conn:
        manual = intent("manual-1", "manual", "您好")
        register_outbound(conn, manual)
        register_outbound(conn, manual.model_copy(update={"body": "changed"}))  # idempotent: first intent wins
    return "manual-1"


def state(store, request_id):
    with store.read() as conn:
        return load_request(conn, request_id)


def test_registration_is_idempotent_and_durable_before_any_attempt(store, request_id):
    request = state(store, request_id)
    assert (request.state, request.body) == ("pending", "您好")


def test_exactly_one_attempt_per_request(store, request_id):
    grant = begin_attempt(store, request_id, "w1", lease_s=60)
    assert isinstance(grant, AttemptGrant) and grant.attempt_no == 1 and grant.send.text == "您好"
    assert begin_attempt(store, request_id, "w2", lease_s=60) == AttemptSkipped("in-progress")
    record_sent(store, request_id, 1, SendReceipt(platform_message_id="p1"))
    assert begin_attempt(store, request_id, "w3", lease_s=60) == AttemptSkipped("settled")
    assert state(store, request_id).platform_message_id == "p1"


def test_an_abandoned_attempt_becomes_result_unknown_without_a_new_attempt(store, request_id):
    assert isinstance(begin_attempt(store, request_id, "dead-worker", lease_s=0.05), AttemptGrant)
    with clock_at(now_ms() + 100):  # its lease lapsed
        assert begin_attempt(store, request_id, "w2", lease_s=0.05) == AttemptSkipped("abandoned")
    assert begin_attempt(store, request_id, "w3", lease_s=0.05) == AttemptSkipped("result-unknown")
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM outbox_attempt").scalar_one() == 1
    assert state(store, request_id).state == "result-unknown"
    assert settle_by_receipt(store, request_id, SendReceipt(platform_message_id="p9"), attempt_lease_s=120)
    assert (state(store, request_id).state, state(store, request_id).platform_message_id) == ("sent", "p9")


def test_a_send_the_platform_never_received_is_attempted_again_only_after_the_attempt_lease(store, request_id):
    grant = begin_attempt(store, request_id, "w1", lease_s=60)
    record_failure(store, request_id, grant.attempt_no, SendFailure("unknown", "ReadTimeout"))
    # Too early: a send still on its way could arrive after this answer. The query does not count.
    assert not settle_by_receipt(store, request_id, NeverReceived(), attempt_lease_s=60)
    assert (state(store, request_id).state, state(store, request_id).receipt_queries) == ("result-unknown", 0)
    assert not settle_by_receipt(store, request_id, None, attempt_lease_s=0)  # a platform that cannot tell
    assert settle_by_receipt(store, request_id, NeverReceived(), attempt_lease_s=0)
    request = state(store, request_id)
    assert (request.state, request.error_code, request.receipt_queries) == ("pending", "KEFU_NEVER_RECEIVED", 2)
    assert begin_attempt(store, request_id, "w2", lease_s=60).attempt_no == 2  # a new attempt, never a resend


def test_failure_kinds(store, request_id):
    grant = begin_attempt(store, request_id, "w", 60)
    record_failure(store, request_id, grant.attempt_no, SendFailure("not-submitted", "QPS_LIMIT"))
    assert state(store, request_id).state == "pending"  # safe to try again, as a new attempt
    second = begin_attempt(store, request_id, "w", 60)
    assert second.attempt_no == 2
    record_failure(store, request_id, 2, SendFailure("rejected", "RECIPIENT_BLOCKED"))
    assert (state(store, request_id).state, state(store, request_id).error_code) == ("failed", "RECIPIENT_BLOCKED")
    assert begin_attempt(store, request_id, "w", 60) == AttemptSkipped("settled")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("UPDATE customer SET handling_paused = 1, handling_epoch = 1", "revoked"),
        ("UPDATE account SET connection_intent = 'disconnected'", "revoked"),
        ("UPDATE route SET generation = 2", "route-changed"),
        ("UPDATE route SET enabled = 0", "route-changed"),
    ],
)
def test_a_stale_auto_send_ends_without_an_attempt(store, customer, change, reason):
    with store.write() as conn:
        register_outbound(conn, intent("auto-1", "auto", "好的", batch_id="b1", route_generation=1, handling_epoch=0))
        conn.execute(change)
    assert begin_attempt(store, "auto-1", "w", 60) == AttemptSkipped(reason)
    assert state(store, "auto-1").state == reason
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM outbox_attempt").scalar_one() == 0


@pytest.mark.parametrize("enabled", [False, True])
def test_an_auto_send_admitted_under_all_is_stale_once_a_specific_route_governs_its_conversation(
    store, customer, enabled
):
    """SPEC 3.2: a specific route beats `all` for its conversation, even disabled: an operator
    who adds one (to silence the agent there, or to answer it otherwise) stops what `all` queued."""
    with store.write() as conn:
        register_outbound(conn, intent("auto-1", "auto", "好的", batch_id="b1", route_generation=1, handling_epoch=0))
    spec = RouteSpec(id="only-c", account_id="shop", conversation_type="direct", target="specific", conversation_id="c")
    create_route(store, spec.model_copy(update={"enabled": enabled}), op_id="op-c")
    assert begin_attempt(store, "auto-1", "w", 60) == AttemptSkipped("route-changed")


def test_replies_to_one_customer_go_out_in_registration_order(store, customer):
    with store.write() as conn:
        conn.execute(
            "INSERT INTO customer (account_id, conversation_id, conversation_type, last_activity_at)"
            " VALUES ('shop', 'other', 'direct', 0)"
        )
        for request_id in ("m-1", "m-2", "m-3"):
            register_outbound(conn, intent(request_id, "manual", request_id))
        register_outbound(conn, intent("x-1", "manual", "x").model_copy(update={"customer_id": 2}))
    assert next_pending(store, 1) == "m-1"
    assert begin_attempt(store, "m-2", "w", 60) == AttemptSkipped("waiting-for-earlier")
    assert isinstance(begin_attempt(store, "x-1", "w", 60), AttemptGrant)  # other customers never wait
    first = begin_attempt(store, "m-1", "w", 60)
    assert begin_attempt(store, "m-2", "w", 60) == AttemptSkipped("waiting-for-earlier")  # m-1 is being sent
    record_failure(store, "m-1", first.attempt_no, SendFailure("unknown", "TIMEOUT"))
    assert next_pending(store, 1) == "m-2"  # an unknown outcome is no longer being attempted
    second = begin_attempt(store, "m-2", "w", 60)
    record_sent(store, "m-2", second.attempt_no, SendReceipt(platform_message_id="p2"))
    assert isinstance(begin_attempt(store, "m-3", "w", 60), AttemptGrant)
