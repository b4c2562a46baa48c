"""Handling control (SPEC 3.5): after a pause nothing automatic reaches the buyer."""

from __future__ import annotations

import pytest

from runtime.admission.batches import evaluate
from runtime.admission.handling import handling_state, pause_handling, resume_handling
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.session_log import SessionLog
from runtime.agent.sessions import session_path
from runtime.agent.turn import run_turn
from runtime.errors import KefuError
from runtime.inbound.ingest import ingest_page
from runtime.outbox.requests import AttemptSkipped, begin_attempt

RULES = RulesProvider(load_knowledge(None))


def say(store, transport, platform, text, buyer="b1"):
    return ingest_page(
        store, transport.page_of("shop", [platform.buyer_says("shop", buyer, "张三", text)])
    ).customer_ids[0]


def turn(store, settings, customer, registered=None):
    return run_turn(
        store,
        RULES,
        customer,
        settings.sessions_dir,
        settings.zone,
        settings.agent,
        on_registered=(registered.append if registered is not None else lambda r: None),
    )


def states(store, table, column="state"):
    with store.read() as conn:
        return [row[0] for row in conn.execute(f"SELECT {column} FROM {table} ORDER BY rowid")]


def test_pause_bumps_the_epoch_once_and_resume_keeps_it(store, shop, transport, platform):
    customer = say(store, transport, platform, "你好")
    first = pause_handling(store, customer, "operator")
    again = pause_handling(store, customer, "operator again")
    assert (first.paused, first.epoch, first.reason) == (True, 1, "operator")
    assert again == first  # idempotent
    resumed = resume_handling(store, customer)
    assert (resumed.paused, resumed.epoch, resumed.reason) == (False, 1, None)
    assert resume_handling(store, customer) == resumed
    with pytest.raises(KefuError, match="KEFU_CUSTOMER_UNKNOWN"):
        pause_handling(store, 999, "x")


def test_a_reply_registered_before_the_pause_is_revoked_and_never_attempted(store, settings, shop, transport, platform):
    customer = say(store, transport, platform, "什么时候发货")
    evaluate(store, customer, 1000)
    registered: list[str] = []
    turn(store, settings, customer, registered)
    pause_handling(store, customer, "operator")
    resume_handling(store, customer)  # resuming never revives an old authorization
    assert states(store, "outbox_request") == ["revoked"]
    assert begin_attempt(store, registered[0], "w", 60) == AttemptSkipped("settled")
    assert states(store, "outbox_attempt") == []


def test_waiting_and_paused_input_is_suppressed_and_only_new_input_is_admitted(store, shop, transport, platform):
    customer = say(store, transport, platform, "第一条")
    pause_handling(store, customer, "operator")
    say(store, transport, platform, "暂停期间的消息")
    assert evaluate(store, customer, 1000).reason == "paused"
    resume_handling(store, customer)
    assert evaluate(store, customer, 1000).reason == "nothing-pending"
    say(store, transport, platform, "恢复后的新消息")
    decision = evaluate(store, customer, 1000)
    assert decision.reason == "admitted"
    assert states(store, "inbound_message") == ["suppressed", "suppressed", "claimed"]


def test_a_batch_admitted_before_the_pause_never_runs(store, settings, shop, transport, platform):
    customer = say(store, transport, platform, "什么时候发货")
    evaluate(store, customer, 1000)
    pause_handling(store, customer, "operator")
    result = turn(store, settings, customer)
    assert result.outcome == "revoked"
    assert states(store, "admission_batch") == ["revoked"]
    assert states(store, "inbound_message") == ["suppressed"]
    assert states(store, "outbox_request") == []


def test_a_pause_during_a_turn_stops_it_before_the_next_step(store, settings, shop, transport, platform):
    customer = say(store, transport, platform, "什么时候发货")
    evaluate(store, customer, 1000)

    class PausingRules(RulesProvider):
        def complete(self, messages, tools):
            reply = super().complete(messages, tools)
            pause_handling(store, customer, "operator")  # the operator acts while the model thinks
            return reply

    result = run_turn(
        store, PausingRules(RULES.knowledge), customer, settings.sessions_dir, settings.zone, settings.agent
    )
    assert result.outcome == "interrupted"
    events = SessionLog(session_path(settings.sessions_dir, result.session_id)).load()
    tool_results = [e for e in events if e.type == "tool/result"]
    assert len(tool_results) == 1 and "KEFU_HANDLING_PAUSED" in tool_results[0].content
    assert (events[-1].type, events[-1].outcome, events[-1].reason) == ("turn/end", "interrupted", "handling-paused")
    assert states(store, "outbox_request") == []
    assert states(store, "admission_batch") == ["revoked"]


def test_no_faq_answer_hands_the_customer_to_a_human(store, settings, shop, transport, platform):
    customer = say(store, transport, platform, "可以寄到国外吗")
    evaluate(store, customer, 1000)
    result = turn(store, settings, customer)
    assert result.outcome == "complete"
    state = handling_state(store, customer)
    assert (state.paused, state.reason) == (True, f"handoff: {RULES.knowledge.handoff_reason}")
    assert states(store, "outbox_request") == []
    events = SessionLog(session_path(settings.sessions_dir, result.session_id)).load()
    assert [e.type for e in events][-3:] == ["tool/result", "step/end", "turn/end"]  # no further model step
    say(store, transport, platform, "人呢？")
    assert evaluate(store, customer, 1000).reason == "paused"  # nothing more is automatic
