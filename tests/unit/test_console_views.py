"""What the console reads and who may use it: operators and their roles, the transcript of a
conversation with each send's state, and the customer list's cursor paging."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from runtime.admission.batches import evaluate
from runtime.admission.handling import pause_handling
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.turn import run_turn
from runtime.customers.summaries import list_customers
from runtime.customers.transcript import transcript, transcript_version
from runtime.errors import KefuError
from runtime.inbound.ingest import ingest_page
from runtime.operators.accounts import (
    Role,
    add_operator,
    authenticate,
    disable_operator,
    list_operators,
    operator_named,
)
from runtime.outbox.manual import ManualSend, send_manual
from runtime.outbox.read_receipts import accept_buyer_receipt
from runtime.outbox.requests import begin_attempt, record_failure, record_sent
from runtime.ports import BuyerReadReceipt, SendFailure, SendReceipt
from worker.console.metrics import registry_for


def test_an_operator_signs_in_with_their_password_only_and_roles_nest(store):
    add_operator(store, "alice", Role.OPERATOR, "correct horse")
    with store.read() as conn:
        stored = conn.execute("SELECT password_hash FROM operator").scalar_one()
    assert "correct horse" not in stored and stored.startswith("scrypt$")
    assert authenticate(store, "alice", "correct horse") == operator_named(store, "alice")
    assert authenticate(store, "alice", "wrong horse") is None
    assert authenticate(store, "mallory", "correct horse") is None
    assert Role.ADMIN.allows(Role.OPERATOR) and Role.OPERATOR.allows(Role.VIEWER)
    assert not Role.VIEWER.allows(Role.OPERATOR)
    add_operator(store, "alice", Role.VIEWER, "new password")  # again: a new role and password
    assert authenticate(store, "alice", "correct horse") is None
    assert [(o.name, o.role) for o in list_operators(store)] == [("alice", Role.VIEWER)]
    assert disable_operator(store, "alice") and not disable_operator(store, "alice")
    assert authenticate(store, "alice", "new password") is None
    assert operator_named(store, "alice") is None  # a signed session naming her ends
    assert list_operators(store) == []


@pytest.mark.parametrize(("name", "password"), [("bad name!", "long enough"), ("bob", "short")])
def test_a_bad_operator_name_or_short_password_is_refused_by_code(store, name, password):
    with pytest.raises(KefuError) as refused:
        add_operator(store, name, Role.VIEWER, password)
    assert refused.value.code == "KEFU_OPERATOR_INVALID"
    assert list_operators(store) == []


def say(store, transport, platform, buyer: str, name: str, text: str) -> int:
    said = platform.buyer_says("shop", buyer, name, text)
    return ingest_page(store, transport.page_of("shop", [said])).customer_ids[0]


def test_the_transcript_shows_the_shops_sends_with_their_states_and_who_sent_them(store, shop, transport, platform):
    customer = say(store, transport, platform, "b1", "张三", "在吗")
    version = transcript_version(store, customer)
    send_manual(store, ManualSend(request_id="op-1", customer_id=customer, text="在的", operator="alice"))
    send_manual(store, ManualSend(request_id="op-2", customer_id=customer, text="稍等"))
    first = begin_attempt(store, "op-1", "w", 60)
    receipt = transport.send(first.send)
    record_sent(store, "op-1", first.attempt_no, receipt)
    second = begin_attempt(store, "op-2", "w", 60)
    record_failure(store, "op-2", second.attempt_no, SendFailure("unknown", "TIMEOUT"))
    ingest_page(store, transport.echo_page("shop", platform.received("shop")[0]))  # the echo: shown once, as the send
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM inbound_message").scalar_one() == 2
    shown = [(line.speaker, line.author, line.via, line.text, line.state) for line in transcript(store, customer).lines]
    assert shown == [
        ("buyer", "张三", None, "在吗", None),
        ("console-operator", "alice", "console", "在的", "sent"),
        ("console-operator", None, "cli", "稍等", "result-unknown"),  # no name: an older `kefu send`
    ]
    assert transcript_version(store, customer) != version  # the live view's trigger moved


def test_a_send_the_buyer_read_is_marked_read(store, shop, transport, platform):

    customer = say(store, transport, platform, "b1", "张三", "在吗")
    send_manual(store, ManualSend(request_id="op-1", customer_id=customer, text="在的"))
    grant = begin_attempt(store, "op-1", "w", 60)
    receipt: SendReceipt = transport.send(grant.send)
    record_sent(store, "op-1", grant.attempt_no, receipt)
    [line] = [line for line in transcript(store, customer).lines if line.request_id]
    assert not line.read
    conversation = grant.send.conversation_id
    read = BuyerReadReceipt(
        account_id="shop",
        conversation_id=conversation,
        platform_message_id=receipt.platform_message_id,
        reader_id=grant.send.recipient_id,
        read_at=datetime.now(UTC),
    )
    assert accept_buyer_receipt(store, read) == "stored"
    [line] = [line for line in transcript(store, customer).lines if line.request_id]
    assert line.read


def test_the_customer_list_pages_by_cursor_to_the_end_and_shows_names_and_previews(store, shop, transport, platform):
    for n in range(7):
        say(store, transport, platform, f"b{n}", f"买家{n}", f"第{n}条")
    seen, before = [], None
    while True:
        page = list_customers(store, "simulation", limit=3, before=before)
        seen += [(row.name, row.preview) for row in page]
        if len(page) < 3:
            break
        before = page[-1].cursor
    assert seen == [(f"买家{n}", f"第{n}条") for n in reversed(range(7))]  # newest first, each once
    with pytest.raises(KefuError) as bad:
        list_customers(store, "simulation", before="not-a-cursor")
    assert bad.value.code == "KEFU_CURSOR_INVALID"


def test_the_transcript_shows_the_agents_words_for_operators_beside_its_reply(
    store, settings, shop, transport, platform
):

    customer = say(store, transport, platform, "b1", "张三", "什么时候发货？")
    evaluate(store, customer, 1000)
    rules = RulesProvider(load_knowledge(None))
    run_turn(store, rules, customer, settings.sessions_dir, settings.zone, settings.agent)
    shown = [
        (line.speaker, line.text, line.folded)
        for line in transcript(store, customer, sessions_dir=settings.sessions_dir).lines
    ]
    # The send call is the reply line itself; the closing words stay, folded away as secondary.
    assert [(speaker, folded) for speaker, _, folded in shown] == [
        ("buyer", False),
        ("assistant", False),
        ("agent-note", True),
    ]
    assert shown[2][1] == "已回复顾客。"
    assert [line.speaker for line in transcript(store, customer).lines] == ["buyer", "assistant"]  # the store only


def test_metrics_from_a_known_store_scrape_cleanly_with_their_names_and_values(
    store, settings, shop, transport, platform
):

    first = say(store, transport, platform, "b1", "张三", "在吗")
    second = say(store, transport, platform, "b2", "李四", "什么时候发货？")
    evaluate(store, second, 1000)
    replies: list[str] = []
    rules = RulesProvider(load_knowledge(None))
    run_turn(store, rules, second, settings.sessions_dir, settings.zone, settings.agent, on_registered=replies.append)
    reply = begin_attempt(store, replies[0], "w", 60)
    record_sent(store, replies[0], reply.attempt_no, transport.send(reply.send))
    send_manual(store, ManualSend(request_id="op-1", customer_id=first, text="在的"))
    grant = begin_attempt(store, "op-1", "w", 60)
    record_failure(store, "op-1", grant.attempt_no, SendFailure("unknown", "TIMEOUT"))
    pause_handling(store, first, "VIP")  # an operator took it: nobody waits
    pause_handling(store, second, "handoff: 退款", handoff=True)  # the agent asked: waiting for the shop
    text = generate_latest(registry_for(store, settings)).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("kefu_buyer_messages_received_total", (("shard", "default"),))] == 2
    assert samples[("kefu_sends_result_unknown", (("shard", "default"),))] == 1
    assert samples[("kefu_handoffs_waiting", (("shard", "default"),))] == 1
    assert samples[("kefu_queue_depth", (("queue", "kefu.agent.default"), ("shard", "default")))] == 0  # embedded
    assert (
        samples[("kefu_alerts_undelivered", (("shard", "default"),))] == 2
    )  # the unknown send and the agent's handoff; "VIP" is none
    key = ("kefu_outbox_requests", (("origin", "manual"), ("shard", "default"), ("state", "result-unknown")))
    assert samples[key] == 1
    assert samples[("kefu_listeners", (("shard", "default"), ("state", "stopped")))] == 1  # no account named
    assert samples[("kefu_reply_latency_seconds_count", (("shard", "default"),))] == 1  # the automatic reply only
    assert samples[("kefu_reply_latency_seconds_bucket", (("le", "+Inf"), ("shard", "default")))] == 1
    assert samples[("kefu_reply_latency_seconds_bucket", (("le", "300.0"), ("shard", "default")))] == 1


def test_a_conversation_page_shows_what_the_memory_engine_keeps_about_the_buyer(
    settings, store, shop, transport, platform
):
    from starlette.testclient import TestClient

    from runtime.memory.engine import scope_of
    from runtime.memory.folders import ArchivedMessage, plan_folders
    from runtime.memory.store import MemoryStore
    from worker.console import create_app
    from worker.context import WorkerRuntime

    customer = say(store, transport, platform, "b1", "张三", "以后都发顺丰")
    add_operator(store, "victor", Role.VIEWER, "viewer-pass-1")
    with TestClient(create_app(WorkerRuntime(settings))) as client:
        token = client.get("/login").text.split('name="csrf" value="')[1].split('"')[0]
        client.post("/login", data={"csrf": token, "name": "victor", "password": "viewer-pass-1"})
        assert "nothing archived yet" in client.get(f"/c/{customer}").text  # no memory file yet
        memory = MemoryStore(settings.memory_path)
        said = [ArchivedMessage(role="user", text="我喜欢顺丰快递，以后都发顺丰", at_ms=1)]
        [folder] = memory.commit_archive(scope_of(customer), "p1", plan_folders(said))
        memory.commit_archive(
            scope_of(customer + 1), "p2", plan_folders([ArchivedMessage(role="user", text="别人的", at_ms=1)])
        )
        page = client.get(f"/c/{customer}").text
    shown = page.split('id="memory"')[1].split("</section>")[0]
    assert folder.title in shown and "别人的" not in shown and "nothing archived yet" not in shown


def test_a_pages_lines_keep_their_order_past_ten_and_pages_of_history_meet(store, shop, transport, platform):
    said = [platform.buyer_says("shop", "b1", "张三", f"第{n}句") for n in range(12)]
    [customer] = ingest_page(store, transport.page_of("shop", said)).customer_ids  # one received_at for all
    assert [line.text for line in transcript(store, customer).lines] == [f"第{n}句" for n in range(12)]
    newest = transcript(store, customer, limit=5)
    older = transcript(store, customer, limit=50, before=newest.older)
    assert [line.text for line in older.lines + newest.lines] == [f"第{n}句" for n in range(12)]
    assert older.older is None
    for bad in ("².m1", "x", "12."):
        with pytest.raises(KefuError, match="KEFU_INVALID_INPUT"):
            transcript(store, customer, before=bad)


def test_a_damaged_memory_store_says_so_beside_the_conversation_and_the_page_still_shows(
    settings, store, shop, transport, platform
):
    from starlette.testclient import TestClient

    from worker.console import create_app
    from worker.context import WorkerRuntime

    customer = say(store, transport, platform, "b1", "张三", "在吗")
    add_operator(store, "victor", Role.VIEWER, "viewer-pass-1")
    settings.memory_path.write_bytes(b"this is not a SQLite file at all, " * 100)
    with TestClient(create_app(WorkerRuntime(settings))) as client:
        token = client.get("/login").text.split('name="csrf" value="')[1].split('"')[0]
        client.post("/login", data={"csrf": token, "name": "victor", "password": "viewer-pass-1"})
        page = client.get(f"/c/{customer}")
    assert page.status_code == 200 and "在吗" in page.text
    assert "the memory store cannot be read now (KEFU_MEMORY" in page.text
