"""Manual sends (SPEC 3.8): caller-chosen request ids, retries linked to an unknown predecessor,
a human-console mirror whose placeholder the platform's echo takes over, and echo settlement."""

from __future__ import annotations

import pytest

from runtime.admission.handling import pause_handling
from runtime.agent.history import query_history
from runtime.errors import KefuError
from runtime.inbound.ingest import ingest_page
from runtime.outbox.manual import ManualSend, query_manual, retry_manual, send_manual, send_manual_parts
from runtime.outbox.requests import AttemptGrant, begin_attempt, record_failure, record_sent
from runtime.ports import SendFailure


@pytest.fixture
def customer(store, shop, platform, transport) -> int:
    page = transport.page_of(shop, [platform.buyer_says(shop, "b1", "张三", "在吗")])
    return ingest_page(store, page).customer_ids[0]


def inbound(store, customer: int) -> list[tuple[str, str, str, str]]:
    with store.read() as conn:
        return [
            tuple(row)
            for row in conn.execute(
                (
                    "SELECT platform_message_id, sender_role, body, state FROM inbound_message"
                    " WHERE customer_id = :c ORDER BY id"
                ),
                {"c": customer},
            )
        ]


def deliver(store, transport, request_id: str) -> str:
    """One attempt through the simulator; the platform message id it got, if any."""
    grant = begin_attempt(store, request_id, "operator", lease_s=60)
    assert isinstance(grant, AttemptGrant), grant
    try:
        receipt = transport.send(grant.send)
    except TimeoutError:
        record_failure(store, request_id, grant.attempt_no, SendFailure("unknown", "TimeoutError"))
        return ""
    record_sent(store, request_id, grant.attempt_no, receipt)
    return receipt.platform_message_id


def test_request_ids_are_stable_validated_and_never_reused_for_another_message(store, customer):
    first = send_manual(store, ManualSend(request_id="console-1", customer_id=customer, text="您好，已发货"))
    again = send_manual(store, ManualSend(request_id="console-1", customer_id=customer, text="您好，已发货"))
    assert (first.request_id, first.origin, first.state, first.recipient_id) == ("console-1", "manual", "pending", "b1")
    assert again == first
    with pytest.raises(KefuError) as conflict:
        send_manual(store, ManualSend(request_id="console-1", customer_id=customer, text="另一句"))
    assert conflict.value.code == "KEFU_REQUEST_ID_CONFLICT"
    with pytest.raises(KefuError) as bad:
        ManualSend(request_id="has space", customer_id=customer, text="x")
    assert bad.value.code == "KEFU_REQUEST_ID_INVALID"
    with pytest.raises(KefuError) as unknown:
        send_manual(store, ManualSend(request_id="console-2", customer_id=999, text="x"))
    assert unknown.value.code == "KEFU_CUSTOMER_UNKNOWN"
    with pytest.raises(KefuError) as missing:
        query_manual(store, "console-404")
    assert missing.value.code == "KEFU_REQUEST_UNKNOWN"


def test_allowed_while_paused_but_refused_while_the_account_cannot_deliver(store, customer):
    pause_handling(store, customer, "operator")
    assert (
        send_manual(store, ManualSend(request_id="m-paused", customer_id=customer, text="我来处理")).state == "pending"
    )
    for column, value, says in [
        ("connection_intent", "disconnected", "disconnected"),
        ("authorization", "failed", "not authorised"),
        ("listener_state", "failed", "failed listener"),
    ]:
        with store.write() as conn:
            conn.execute(f"UPDATE account SET {column} = :v", {"v": value})
        with pytest.raises(KefuError) as refused:
            send_manual(store, ManualSend(request_id=f"m-{column}", customer_id=customer, text="x"))
        assert refused.value.code == "KEFU_ACCOUNT_UNAVAILABLE" and says in refused.value.message
        with store.write() as conn:
            conn.execute(
                "UPDATE account SET connection_intent = 'connected', authorization = 'ready',"
                " listener_state = 'stopped'"
            )
        with pytest.raises(KefuError):
            query_manual(store, f"m-{column}")  # nothing was registered


def test_a_sent_manual_message_is_mirrored_once_and_the_echo_takes_over_the_placeholder(
    store, customer, transport, platform, settings
):
    send_manual(store, ManualSend(request_id="console-7", customer_id=customer, text="已经帮您催了"))
    platform_id = deliver(store, transport, "console-7")
    rows = inbound(store, customer)
    assert rows[-1] == ("console-manual:console-7", "human-console", "已经帮您催了", "pending")
    with store.read() as conn:
        assert (
            query_history(conn, customer, 5, None, settings.zone)
            .lines[-1]
            .endswith("[operator from console] 已经帮您催了")
        )
    echo = transport.echo_page("shop", platform.received_by_ref("console-7"))
    ingest_page(store, echo)
    rows = inbound(store, customer)
    assert len(rows) == 2  # the buyer's message and the mirror: the echo added no row
    assert rows[-1] == (platform_id, "human-console", "已经帮您催了", "pending")


def test_an_echo_stored_before_the_send_was_recorded_is_attributed_not_duplicated(store, customer, transport, platform):
    send_manual(store, ManualSend(request_id="console-8", customer_id=customer, text="稍等"))
    grant = begin_attempt(store, "console-8", "operator", lease_s=60)
    receipt = transport.send(grant.send)
    ingest_page(store, transport.echo_page("shop", platform.received_by_ref("console-8")))  # echo first
    record_sent(store, "console-8", grant.attempt_no, receipt)
    rows = inbound(store, customer)
    assert [r[1] for r in rows] == ["external", "human-console"]
    assert rows[-1][0] == receipt.platform_message_id


def test_an_echo_settles_a_result_unknown_send_and_a_retry_needs_an_unknown_predecessor(
    store, customer, transport, platform
):
    send_manual(store, ManualSend(request_id="console-9", customer_id=customer, text="退款已处理"))
    transport.send_timeouts = "after-submit"
    assert deliver(store, transport, "console-9") == ""
    assert query_manual(store, "console-9").state == "result-unknown"
    assert begin_attempt(store, "console-9", "worker", lease_s=60).reason == "result-unknown"  # never resent

    with pytest.raises(KefuError) as no_predecessor:
        retry_manual(store, "console-9b", "console-404")
    assert no_predecessor.value.code == "KEFU_REQUEST_UNKNOWN"
    retry = retry_manual(store, "console-9b", "console-9")
    assert (retry.retry_of, retry.body, retry.state) == ("console-9", "退款已处理", "pending")
    assert retry_manual(store, "console-9b", "console-9") == retry  # replay
    with pytest.raises(KefuError) as twice:
        retry_manual(store, "console-9c", "console-9")
    assert twice.value.code == "KEFU_RETRY_EXISTS"

    ingest_page(store, transport.echo_page("shop", platform.received_by_ref("console-9")))
    settled = query_manual(store, "console-9")
    assert (settled.state, settled.platform_message_id) == (
        "sent",
        platform.received_by_ref("console-9").platform_message_id,
    )
    assert [r[1] for r in inbound(store, customer)] == ["external", "human-console"]  # mirrored once, by the echo id
    with pytest.raises(KefuError) as settled_now:
        retry_manual(store, "console-9d", "console-9")
    assert settled_now.value.code == "KEFU_RETRY_NEEDS_UNKNOWN"
    assert len(platform.received("shop")) == 1  # nothing but the one submission reached the platform


def test_retry_of_a_sent_request_is_refused(store, customer, transport):
    send_manual(store, ManualSend(request_id="console-10", customer_id=customer, text="好的"))
    deliver(store, transport, "console-10")
    with pytest.raises(KefuError) as refused:
        retry_manual(store, "console-10b", "console-10")
    assert refused.value.code == "KEFU_RETRY_NEEDS_UNKNOWN" and "sent" in refused.value.message


def test_a_late_failure_report_never_turns_a_settled_request_back(store, customer, transport, platform):
    send_manual(store, ManualSend(request_id="console-11", customer_id=customer, text="在的"))
    grant = begin_attempt(store, "console-11", "worker", lease_s=60)
    received = platform.receive_send("shop", "sim-direct-b1", "b1", "在的", "console-11")
    ingest_page(store, transport.echo_page("shop", received))  # echo while the attempt is still in flight
    record_failure(store, "console-11", grant.attempt_no, SendFailure("unknown", "TimeoutError"))
    assert query_manual(store, "console-11").state == "sent"


def test_the_parts_of_one_message_are_registered_all_or_none(store, customer):
    send_manual(store, ManualSend(request_id="taken", customer_id=customer, text="旧消息"))
    image = ManualSend(request_id="new.file", customer_id=customer, file_name="a.png", file_data=b"\x89PNG\r\n\x1a\n0")
    with pytest.raises(KefuError) as conflict:
        send_manual_parts(store, [image, ManualSend(request_id="taken", customer_id=customer, text="新消息")])
    assert conflict.value.code == "KEFU_REQUEST_ID_CONFLICT"
    with pytest.raises(KefuError):
        query_manual(store, "new.file")  # the file part was not left behind to be sent alone
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM media").scalar() == 0
