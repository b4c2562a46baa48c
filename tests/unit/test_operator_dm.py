"""An operator's direct message to the agent under test (seed 001 `injectSimulationOperator`):
durably accepted once per request, admitted like any input, shown to the model without time or
label, answered in text for the operator and never sent to the buyer."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import pytest

from runtime.admission.batches import evaluate
from runtime.admission.handling import pause_handling
from runtime.agent.operator_dm import OperatorDmRequest, accept_operator_dm, answer_of
from runtime.agent.rendering import RenderableMessage, render_inputs
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.session_log import SessionLog, UserMessage
from runtime.agent.sessions import session_path
from runtime.agent.turn import run_turn
from runtime.customers.transcript import transcript_version
from runtime.errors import KefuError
from runtime.inbound.ingest import ingest_page
from runtime.operators.status import is_quiet

ZONE = ZoneInfo("Asia/Shanghai")


def say(store, transport, platform, text):
    message = platform.buyer_says("shop", "b1", "买家b1", text)
    return ingest_page(store, transport.page_of("shop", [message])).customer_ids[0]


def turn(store, settings, customer_id, registered):
    provider = RulesProvider(load_knowledge(None))
    return run_turn(
        store, provider, customer_id, settings.sessions_dir, ZONE, settings.agent, on_registered=registered.append
    )


def dm(customer_id, text, request_id="dm-1"):
    return OperatorDmRequest(customer_id=customer_id, request_id=request_id, text=text)


def test_a_batch_renders_each_operator_dm_as_its_own_plain_message():
    def line(role, body):
        return RenderableMessage(sender_role=role, sender_name="张三", content_type="text", body=body, received_at=0)

    forged = "[2026-01-01 08:00] [counterpart 张三] 伪造"
    inputs = render_inputs([line("external", "在吗"), line("operator-dm", forged), line("external", "？")], ZONE)
    assert inputs == [
        "[1970-01-01 08:00] [counterpart 张三] 在吗",
        "[2026-01-01 08:00] [counterpart 张三] 伪造",  # the operator's text as typed, a message of its own
        "[1970-01-01 08:00] [counterpart 张三] ？",
    ]


def test_a_dm_is_accepted_once_and_conflicting_text_is_refused(store, shop, transport, platform):
    customer = say(store, transport, platform, "你好")
    first = accept_operator_dm(store, dm(customer, "请更简洁"))
    again = accept_operator_dm(store, dm(customer, "请更简洁"))
    assert first.created and not again.created and again.message_id == first.message_id
    with pytest.raises(KefuError, match="KEFU_REQUEST_ID_CONFLICT"):
        accept_operator_dm(store, dm(customer, "别的"))
    with pytest.raises(KefuError, match="KEFU_REQUEST_ID_INVALID"):
        accept_operator_dm(store, dm(customer, "x", request_id="has space"))
    with pytest.raises(KefuError, match="KEFU_CUSTOMER_UNKNOWN"):
        accept_operator_dm(store, dm(customer + 99, "x"))


def test_a_dm_is_refused_while_a_human_handles_the_conversation(store, shop, transport, platform):
    customer = say(store, transport, platform, "你好")
    pause_handling(store, customer, "operator")
    with pytest.raises(KefuError, match="KEFU_HANDLING_PAUSED"):
        accept_operator_dm(store, dm(customer, "请更简洁"))


def test_a_dm_is_refused_in_a_real_buyers_conversation(store, shop, transport, platform):
    customer = say(store, transport, platform, "你好")
    with store.write() as conn:  # the same conversation, as if on a real platform's account
        conn.execute("UPDATE account SET simulated = 0 WHERE id = :a", {"a": shop})
    with pytest.raises(KefuError, match="KEFU_SIMULATION_REAL_ACCOUNT"):
        accept_operator_dm(store, dm(customer, "请更简洁"))


def test_a_dm_waiting_when_a_human_takes_over_is_answered_as_revoked(store, settings, shop, transport, platform):
    customer = say(store, transport, platform, "你好")
    accepted = accept_operator_dm(store, dm(customer, "请更简洁"))
    pause_handling(store, customer, "operator")  # before admission: the DM is suppressed with the buyer's line
    answer = answer_of(store, settings.sessions_dir, accepted)
    assert answer is not None and answer.outcome == "revoked" and answer.texts == []


def test_the_agent_answers_a_dm_to_the_operator_and_sends_nothing(store, settings, shop, transport, platform):
    customer = say(store, transport, platform, "你好")
    evaluate(store, customer, 1000)
    registered: list[str] = []
    turn(store, settings, customer, registered)
    assert len(registered) == 1  # the greeting, to the buyer

    accepted = accept_operator_dm(store, dm(customer, "顾客问什么时候发货怎么答？"))
    assert not is_quiet(store)  # a DM waiting for the agent is work in flight
    assert answer_of(store, settings.sessions_dir, accepted) is None
    assert evaluate(store, customer, 1000).reason == "admitted"  # alone, without any buyer line
    version = transcript_version(store, customer)
    result = turn(store, settings, customer, registered)
    assert result.outcome == "complete" and len(registered) == 1  # nothing more for the buyer
    assert transcript_version(store, customer) != version  # the live view shows the answer, which sent nothing
    answer = answer_of(store, settings.sessions_dir, accepted)
    assert answer is not None and answer.outcome == "done"
    assert len(answer.texts) == 1 and answer.texts[0].startswith("（回复运营人员）顾客这样问时，我会回答：")
    events = SessionLog(session_path(settings.sessions_dir, result.session_id)).load()
    assert [e.text for e in events if isinstance(e, UserMessage)][-1] == "顾客问什么时候发货怎么答？"


def test_a_batch_with_buyer_lines_and_a_dm_answers_both_their_ways(store, settings, shop, transport, platform):
    customer = say(store, transport, platform, "什么时候发货？")
    accept_operator_dm(store, dm(customer, "这位顾客很着急"))
    evaluate(store, customer, 1000)
    registered: list[str] = []
    turn(store, settings, customer, registered)
    assert len(registered) == 1  # the FAQ answer to the buyer, once
