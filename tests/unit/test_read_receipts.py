"""Buyer read receipts (SPEC 3.9): only for a message we sent, in a direct conversation, read by
its buyer; stored once, kept across restarts; the session hears of each once, at its next step."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runtime.admission.batches import evaluate
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.session_log import SessionLog
from runtime.agent.sessions import session_path
from runtime.agent.turn import run_turn
from runtime.inbound.ingest import ingest_page
from runtime.inbound.pages import parse_page
from runtime.outbox.read_receipts import accept_buyer_receipt
from runtime.outbox.requests import AttemptGrant, begin_attempt, record_sent, register_outbound
from runtime.ports import BuyerReadReceipt, SendReceipt
from runtime.store import DeliveryStore
from runtime.store.tables import OutboundIntent


def say(store, transport, platform, text: str) -> int:
    return ingest_page(
        store, transport.page_of("shop", [platform.buyer_says("shop", "b1", "张三", text)])
    ).customer_ids[0]


def turn_and_deliver(store, settings, transport, customer_id: int) -> list[str]:
    """Admit, run the rules agent's turn, and deliver what it registered. The sent request ids."""
    registered: list[str] = []
    evaluate(store, customer_id, 1000)
    run_turn(
        store,
        RulesProvider(load_knowledge(None)),
        customer_id,
        settings.sessions_dir,
        settings.zone,
        settings.agent,
        on_registered=registered.append,
    )
    for request_id in registered:
        grant = begin_attempt(store, request_id, "w", lease_s=60)
        assert isinstance(grant, AttemptGrant)
        record_sent(store, request_id, grant.attempt_no, transport.send(grant.send))
    return registered


def receipt(platform_message_id: str, conversation: str = "sim-direct-b1", reader: str = "b1") -> BuyerReadReceipt:
    return BuyerReadReceipt(
        account_id="shop",
        conversation_id=conversation,
        platform_message_id=platform_message_id,
        reader_id=reader,
        read_at=datetime(2026, 11, 30, 6, 30, tzinfo=UTC),
    )


def read_events(settings, store, customer_id: int) -> list:
    with store.read() as conn:
        session_id = conn.execute("SELECT session_id FROM customer WHERE id = :c", {"c": customer_id}).scalar()
    log = SessionLog(session_path(settings.sessions_dir, session_id))
    return [e for e in log.load() if e.type == "im/message-read"]


@pytest.fixture
def sent(store, shop, settings, transport, platform) -> tuple[int, str]:
    customer_id = say(store, transport, platform, "什么时候发货？")
    [request_id] = turn_and_deliver(store, settings, transport, customer_id)
    return customer_id, platform.received_by_ref(request_id).platform_message_id


def test_only_our_sent_message_read_by_its_buyer_is_stored_and_only_once(store, settings, sent):
    customer_id, platform_id = sent
    assert accept_buyer_receipt(store, receipt("no-such-message")) == "unknown-message"
    assert accept_buyer_receipt(store, receipt(platform_id, conversation="another")) == "unknown-message"
    assert accept_buyer_receipt(store, receipt(platform_id, reader="someone-else")) == "not-the-buyer"
    assert accept_buyer_receipt(store, receipt(platform_id)) == "stored"
    assert accept_buyer_receipt(store, receipt(platform_id)) == "already-stored"
    reopened = DeliveryStore(settings.delivery_path, settings.delivery)  # a restart keeps it
    with reopened.read() as conn:
        stored = conn.execute("SELECT customer_id, reader_id, delivered_at FROM buyer_read").all()
    reopened.close()
    assert stored == [(customer_id, "b1", None)]
    with store.read() as conn:  # an idle agent is not woken: no batch, no turn
        assert conn.execute("SELECT count(*) FROM admission_batch WHERE state != 'done'").scalar() == 0


def test_a_group_message_is_refused(store, shop):
    group = {
        "conversation_id": "g1",
        "conversation_type": "group",
        "messages": [
            {
                "platform_message_id": "gm1",
                "sender": {"id": "u1", "role": "buyer"},
                "content": {"type": "text", "text": "@店小二 在吗"},
                "occurred_at": "2026-11-30T06:05:00+00:00",
            }
        ],
    }
    page = {"account_id": "shop", "stream_id": "s", "cursor": "1", "page_op_id": "p1", "groups": [group]}
    customer_id = ingest_page(store, parse_page(page)).customer_ids[0]
    with store.write() as conn:
        intent = OutboundIntent(
            request_id="g-reply",
            customer_id=customer_id,
            account_id="shop",
            conversation_id="g1",
            origin="manual",
            body="在的",
        )
        register_outbound(conn, intent)
    grant = begin_attempt(store, "g-reply", "w", lease_s=60)
    record_sent(store, "g-reply", grant.attempt_no, SendReceipt(platform_message_id="g-sent-1"))
    assert accept_buyer_receipt(store, receipt("g-sent-1", conversation="g1", reader="u1")) == "not-direct"


def test_the_session_hears_of_a_receipt_once_at_its_next_step(store, settings, transport, platform, sent):
    customer_id, platform_id = sent
    accept_buyer_receipt(store, receipt(platform_id))
    assert read_events(settings, store, customer_id) == []  # nothing until the agent's next step

    say(store, transport, platform, "怎么退货？")
    turn_and_deliver(store, settings, transport, customer_id)
    [event] = read_events(settings, store, customer_id)
    assert event.platform_message_id == platform_id and event.text.startswith("[im-read] 顾客已读你发送的消息")
    accept_buyer_receipt(store, receipt(platform_id))  # repeated by the platform

    say(store, transport, platform, "发什么快递？")
    sent_later = turn_and_deliver(store, settings, transport, customer_id)
    assert len(read_events(settings, store, customer_id)) == 1
    assert len(sent_later) == 1  # the notice did not make the agent answer twice
