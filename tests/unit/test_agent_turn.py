"""Admission and one agent turn through the rules provider, against a real store and log."""

from __future__ import annotations

import json

import pytest

from runtime.admission.batches import evaluate
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.session_log import SessionLog
from runtime.agent.sessions import session_path
from runtime.agent.tools import TurnBinding, execute
from runtime.agent.turn import run_turn
from runtime.errors import KefuError
from runtime.inbound.ingest import ingest_page
from runtime.ports import ChatMessage, ToolCall

KNOWLEDGE = load_knowledge(None)


def say(store, transport, platform, buyer, text):
    message = platform.buyer_says("shop", buyer, f"买家{buyer}", text)
    return ingest_page(store, transport.page_of("shop", [message])).customer_ids[0]


def turn(store, settings, customer_id, registered=None):
    return run_turn(
        store,
        RulesProvider(KNOWLEDGE),
        customer_id,
        settings.sessions_dir,
        settings.zone,
        settings.agent,
        on_registered=(registered.append if registered is not None else lambda r: None),
    )


def answered_then_cut(store, settings, transport, platform, text, before):
    """A customer whose turn ran, and its log cut back to before the turn's first `before`
    event, as it was when a worker died there. Returns (customer id, log)."""
    customer = say(store, transport, platform, "b1", text)
    evaluate(store, customer, 1000)
    turn(store, settings, customer)
    log = SessionLog(session_path(settings.sessions_dir, f"s{customer}-1"))
    events = log.load()
    cut = next(e.seq for e in events if e.type == before)
    log.path.write_bytes(
        b"".join(log._compressor.compress((e.model_dump_json() + "\n").encode()) for e in events[:cut])
    )
    return customer, log


def test_one_open_batch_per_customer(store, shop, transport, platform):
    customer = say(store, transport, platform, "b1", "什么时候发货")
    first = evaluate(store, customer, batch_size=1000)
    say(store, transport, platform, "b1", "发什么快递")
    again = evaluate(store, customer, batch_size=1000)
    assert first.reason == "admitted" and (again.reason, again.batch_id) == ("open-batch", first.batch_id)


def test_batch_size_bounds_a_batch(store, shop, transport, platform):
    for text in ["一", "二", "三"]:
        customer = say(store, transport, platform, "b1", text)
    evaluate(store, customer, batch_size=2)
    with store.read() as conn:
        assert conn.execute("SELECT message_count FROM admission_batch").scalar_one() == 2


def test_specific_route_beats_all_even_when_disabled(store, shop, transport, platform):
    from runtime.admission.routes import RouteSpec, create_route

    vip = platform.conversation_for("b1")
    spec = RouteSpec(id="vip", account_id="shop", conversation_type="direct", target="specific", conversation_id=vip)
    create_route(store, spec.model_copy(update={"enabled": False}), op_id="op-vip")
    blocked = say(store, transport, platform, "b1", "你好")
    allowed = say(store, transport, platform, "b2", "你好")
    assert evaluate(store, blocked, 1000).reason == "route-disabled"
    assert evaluate(store, allowed, 1000).reason == "admitted"


def test_a_turn_logs_the_batch_then_answers_through_the_tool(store, settings, shop, transport, platform):
    customer = say(store, transport, platform, "b1", "什么时候发货？")
    evaluate(store, customer, 1000)
    registered: list[str] = []
    result = turn(store, settings, customer, registered)
    assert result.outcome == "complete" and len(registered) == 1
    events = SessionLog(session_path(settings.sessions_dir, result.session_id)).load()
    assert [e.type for e in events] == [
        "system/message",
        "turn/start",
        "user/message",
        "step/start",
        "request/header",
        "request/context",
        "assistant/message",
        "tool/call",
        "tool/result",
        "step/end",
        "step/start",
        "request/context",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    assert "[counterpart 买家b1] 什么时候发货？" in events[2].text
    usage = [e.usage for e in events if e.type == "assistant/message"]
    assert [u["source"] for u in usage] == ["estimate", "estimate"]
    assert 0 < usage[0]["context_tokens"] < usage[1]["context_tokens"]  # the context grows within the turn
    with store.read() as conn:
        assert conn.execute("SELECT state FROM inbound_message").scalar_one() == "committed"
        assert conn.execute("SELECT state FROM admission_batch").scalar_one() == "done"
        body = conn.execute("SELECT body FROM outbox_request").scalar_one()
    assert "48小时内发货" in body


def test_an_interrupted_turn_gets_one_follow_up_that_does_not_send_twice(store, settings, shop, transport, platform):
    # a crash right after the send was registered: the tool started, no result logged
    customer, log = answered_then_cut(store, settings, transport, platform, "可以退货吗", before="tool/result")
    with store.write() as conn:
        conn.execute("UPDATE admission_batch SET state = 'committed'")

    result = turn(store, settings, customer)
    assert result.outcome == "complete"
    again = turn(store, settings, customer)
    assert again is None  # the batch is done: no second follow-up
    events = SessionLog(log.path).load()
    kinds = [e.kind for e in events if e.type == "turn/start"]
    assert kinds == ["batch", "follow-up"]
    with store.read() as conn:
        request_id, state = conn.execute("SELECT request_id, state FROM outbox_request").one()
    # The outbox holds what the cut-off call registered: the follow-up reads it as the tool's
    # own answer, not as "outcome unknown" (which a model answers by sending again).
    closer = next(e for e in events if e.type == "tool/result")
    assert (closer.is_error, closer.code, closer.request_id) == (False, None, request_id)
    assert closer.content.startswith(f"Queued for delivery: text {request_id} (status ")


def test_a_turn_cut_off_before_its_reply_was_registered_reads_outcome_unknown(
    store, settings, shop, transport, platform
):
    customer, log = answered_then_cut(store, settings, transport, platform, "可以退货吗", before="tool/result")
    with store.write() as conn:  # the registration's transaction never committed
        conn.execute("UPDATE admission_batch SET state = 'committed'")
        conn.execute("DELETE FROM outbox_attempt")
        conn.execute("DELETE FROM outbox_request")

    assert turn(store, settings, customer).outcome == "complete"
    events = SessionLog(log.path).load()
    closer = next(e for e in events if e.type == "tool/result")
    assert (closer.is_error, closer.code) == (True, "TOOL_OUTCOME_UNKNOWN")


def test_a_crash_between_logging_the_batch_and_its_commit_brings_one_follow_up(
    store, settings, shop, transport, platform
):
    # logged the batch, wrote nothing since
    customer, log = answered_then_cut(store, settings, transport, platform, "发什么快递", before="step/start")
    with store.write() as conn:  # the batch commit rides on the turn's first write, which never came
        conn.execute("UPDATE admission_batch SET state = 'claimed'")
        conn.execute("UPDATE inbound_message SET state = 'claimed'")
        conn.execute("DELETE FROM outbox_request")

    assert turn(store, settings, customer).outcome == "complete"
    events = SessionLog(log.path).load()
    assert [e.kind for e in events if e.type == "turn/start"] == ["batch", "follow-up"]
    with store.read() as conn:
        assert conn.execute("SELECT state FROM inbound_message").scalar_one() == "committed"
        assert conn.execute("SELECT state FROM admission_batch").scalar_one() == "done"
        assert conn.execute("SELECT count(*) FROM outbox_request").scalar_one() == 1


def test_a_turn_that_hands_off_without_sending_commits_what_the_agent_saw(store, settings, shop, transport, platform):
    customer = say(store, transport, platform, "b1", "可以寄到国外吗")  # no FAQ answer: the rules agent hands off
    evaluate(store, customer, 1000)
    assert turn(store, settings, customer).outcome == "complete"
    with store.read() as conn:
        assert conn.execute("SELECT state FROM inbound_message").scalar_one() == "committed"
        assert conn.execute("SELECT state FROM admission_batch").scalar_one() == "done"
        assert conn.execute("SELECT handling_paused FROM customer").scalar_one() == 1


@pytest.fixture
def binding(store, settings, shop, transport, platform):
    from runtime.admission.batches import load_customer, open_batch

    customer_id = say(store, transport, platform, "b1", "你好")
    evaluate(store, customer_id, 1000)
    with store.read() as conn:
        return TurnBinding(
            store=store,
            customer=load_customer(conn, customer_id),
            batch=open_batch(conn, customer_id),
            session_id="s",
            account_revision=1,
            zone=settings.zone,
        )


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ("{not json", "Error: arguments of im_send_message are not valid JSON"),
        ('{"txt": "hi"}', "Error: invalid arguments for im_send_message: text: Field required"),
        ('{"text": ""}', "Error: invalid arguments for im_send_message: text: String should have at least 1 character"),
    ],
)
def test_broken_tool_arguments_get_a_model_readable_error(binding, arguments, expected):
    outcome = execute(binding, ToolCall(id="c1", name="im_send_message", arguments=arguments))
    assert outcome.is_error and outcome.content.startswith(expected)
    unknown = execute(binding, ToolCall(id="c2", name="im_refund", arguments="{}"))
    assert unknown.is_error and "unknown tool" in unknown.content


def test_history_pages_backwards_through_this_conversation_only(binding, store, transport, platform):
    for text in ["第二条", "第三条"]:
        say(store, transport, platform, "b1", text)
    say(store, transport, platform, "b2", "别人的消息")
    latest = execute(binding, ToolCall(id="h1", name="im_query_history", arguments='{"limit": 2}'))
    lines = latest.content.splitlines()
    assert [line.split("] ", 2)[-1] for line in lines[:2]] == ["第二条", "第三条"]
    assert lines[0].startswith("[20") and "[counterpart 买家b1]" in lines[0]
    before = int(lines[-1].removeprefix("(older messages: before=").rstrip(")"))
    older = execute(binding, ToolCall(id="h2", name="im_query_history", arguments=f'{{"before": {before}}}'))
    assert older.content.splitlines()[0].endswith("你好") and older.content.endswith("(start of conversation)")
    assert "别人的消息" not in latest.content + older.content
    bad = execute(binding, ToolCall(id="h3", name="im_query_history", arguments='{"limit": 500}'))
    assert bad.is_error and "limit" in bad.content


def test_rules_provider_answers_faq_greeting_and_fallback():
    rules = RulesProvider(KNOWLEDGE)
    assert "48小时内发货" in rules.answer(["什么时候发货"])
    assert rules.answer(["你好"]) == KNOWLEDGE.greeting
    assert rules.answer(["可以寄到国外吗"]) is None
    reply = rules.complete([ChatMessage(role="user", content="[2026-11-30 14:05] [counterpart 张三] 发什么快递")], [])
    assert [c.name for c in reply.tool_calls] == ["im_send_message"]
    assert "中通" in json.loads(reply.tool_calls[0].arguments)["text"]
    fallback = rules.complete(
        [ChatMessage(role="user", content="[2026-11-30 14:05] [counterpart 张三] 可以寄到国外吗")], []
    )
    assert [c.name for c in fallback.tool_calls] == ["im_handoff"]
    assert json.loads(fallback.tool_calls[0].arguments)["reason"] == KNOWLEDGE.handoff_reason


def test_a_broken_knowledge_file_names_the_file(tmp_path):
    bad = tmp_path / "faq.toml"
    bad.write_text("greeting = 1\n", encoding="utf-8")
    with pytest.raises(KefuError) as raised:
        load_knowledge(bad)
    assert raised.value.code == "KEFU_KNOWLEDGE_INVALID" and str(bad) in str(raised.value)


def test_the_context_estimate_is_deterministic_and_counts_cjk_per_character():
    from runtime.agent.context import estimate_tokens

    messages = [ChatMessage(role="user", content="什么时候发货"), ChatMessage(role="user", content="abcdefgh")]
    assert estimate_tokens(messages) == (4 + 6) + (4 + 2)
    assert estimate_tokens(messages) == estimate_tokens(list(messages))


def test_reconcile_session_commits_a_batch_the_log_already_finished(store, settings, shop, transport, platform):
    customer = say(store, transport, platform, "b1", "发什么快递")
    evaluate(store, customer, 1000)
    first = turn(store, settings, customer)
    with store.write() as conn:  # the crash: turn/end was durable, the store's update was not
        conn.execute("UPDATE admission_batch SET state = 'claimed'")
        conn.execute("UPDATE inbound_message SET state = 'claimed'")
    again = turn(store, settings, customer)
    assert (again.batch_id, again.outcome) == (first.batch_id, "complete")
    events = SessionLog(session_path(settings.sessions_dir, first.session_id)).load()
    assert [e.type for e in events].count("turn/start") == 1  # no second turn, no second reply
    with store.read() as conn:
        assert conn.execute("SELECT state FROM admission_batch").scalar_one() == "done"
        assert conn.execute("SELECT state FROM inbound_message").scalar_one() == "committed"
        assert conn.execute("SELECT count(*) FROM outbox_request").scalar_one() == 1


def test_a_finished_turn_records_its_model_calls_and_status_reports_them(store, settings, shop, transport, platform):
    """The rules agent's turn makes two model steps (the reply, then its closing text): the
    batch keeps both calls and their time, and the operations view counts them."""
    from runtime.operators.status import operations

    customer = say(store, transport, platform, "b1", "什么时候发货？")
    evaluate(store, customer, 1000)
    assert turn(store, settings, customer).outcome == "complete"
    with store.read() as conn:
        calls, ms = conn.execute("SELECT model_calls, model_ms FROM admission_batch").one()
    assert calls == 2 and ms >= 0
    now = operations(store)
    assert now.model_calls == 2 and now.model_call_mean_s is not None
