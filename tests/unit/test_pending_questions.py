"""A question the agent asked the buyer is kept with its reply and offered to the next batch's
turn, across a takeover and a new session; once to one batch (and its retries), never to a later
one; a question that never reached the buyer is not offered."""

from __future__ import annotations

from runtime.admission.batches import evaluate
from runtime.admission.handling import pause_handling, resume_handling
from runtime.agent.rotation import rotate_by_operator
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.session_log import SessionLog, UserMessage
from runtime.agent.sessions import session_path
from runtime.agent.turn import run_turn
from runtime.inbound.ingest import ingest_page

KNOWLEDGE = load_knowledge(None)
QUESTION = "好的，请问您的订单号是多少？我帮您处理。"


def say(store, settings, transport, platform, text):
    message = platform.buyer_says("shop", "b1", "张三", text)
    customer = ingest_page(store, transport.page_of("shop", [message])).customer_ids[0]
    evaluate(store, customer, 1000)
    return customer, run_turn(
        store, RulesProvider(KNOWLEDGE), customer, settings.sessions_dir, settings.zone, settings.agent
    )


def questions(store):
    with store.read() as conn:
        return conn.execute("SELECT request_id, state, offered_batch FROM pending_question").all()


def batch_text(settings, result) -> str:
    log = SessionLog(session_path(settings.sessions_dir, result.session_id))
    log.load()
    return [e for e in log.events if isinstance(e, UserMessage) and e.source == result.batch_id][0].text


def test_a_question_is_offered_to_the_next_batch_after_a_takeover_and_a_new_session(
    store, settings, shop, transport, platform
):
    customer, asked = say(store, settings, transport, platform, "我的地址写错了")
    [(request_id, state, _)] = questions(store)
    with store.read() as conn:
        body = conn.execute("SELECT body FROM outbox_request WHERE request_id = :r", {"r": request_id}).scalar()
    assert state == "pending" and body == QUESTION
    with store.write() as conn:  # the question went out before the human came
        conn.execute("UPDATE outbox_request SET state = 'sent' WHERE request_id = :r", {"r": request_id})
    pause_handling(store, customer, "operator takes over")
    resume_handling(store, customer)
    rotate_by_operator(store, customer, settings.sessions_dir, None, settings.agent)
    _, answered = say(store, settings, transport, platform, "订单号 A7731")
    assert answered.session_id != asked.session_id  # the question is not in the new session's log
    first = batch_text(settings, answered).splitlines()[0]
    assert first.startswith("[kefu] 你在 ") and f"「{QUESTION}」" in first
    assert questions(store) == [(request_id, "offered", answered.batch_id)]
    resume_handling(store, customer)  # the rules agent handed the answer to a human
    _, later = say(store, settings, transport, platform, "发什么快递？")
    assert "[kefu]" not in batch_text(settings, later)  # offered once


def test_a_question_revoked_before_it_was_sent_is_not_offered(store, settings, shop, transport, platform):
    customer, _ = say(store, settings, transport, platform, "地址错了")
    pause_handling(store, customer, "operator takes over")  # the unsent question is revoked
    resume_handling(store, customer)
    _, answered = say(store, settings, transport, platform, "订单号 A7731")
    assert "[kefu]" not in batch_text(settings, answered)


def test_a_newer_question_supersedes_one_no_turn_saw(store, settings, shop, transport, platform):
    from runtime.agent.pending_questions import ask

    customer, _ = say(store, settings, transport, platform, "在吗")
    with store.write() as conn:
        for n in (1, 2):
            ask(conn, f"q{n}", customer, f"问题{n}")
    assert sorted(questions(store)) == [("q1", "superseded", None), ("q2", "pending", None)]
