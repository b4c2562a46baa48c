"""Questions the agent asked the buyer and has not seen answered (seed 000: a pending question is
persisted before the pause, so it is not only in a process's memory).

The agent marks a reply as a question (`im_send_message` with `awaits_answer`); it is stored in
the transaction that registers the reply. The next batch's turn is offered it: a note before the
buyer's lines says what was asked and when, so the agent reads what follows as the answer even
when a human took over in between, the worker was killed, or the session rotated and the
question is no longer in the model's context. A question is offered to one batch: to that
batch's retries and follow-ups again, never to a later batch.
"""

from __future__ import annotations

from zoneinfo import ZoneInfo

from pydantic import BaseModel

from runtime.agent.rendering import shop_time
from runtime.agent.script_clock import ConversationClock
from runtime.store import now_ms, queries
from runtime.store.connection import Connection
from runtime.store.states import OutboxState, QuestionState

# A question whose reply was revoked (a human took over first), refused or failed never reached
# the buyer: there is nothing to be reminded of.
_OFFERABLE = queries.pending_question.offerable(
    (OutboxState.FAILED, OutboxState.REVOKED, OutboxState.ROUTE_CHANGED, OutboxState.SKIPPED)
)


class PendingQuestion(BaseModel):
    request_id: str
    customer_id: int
    question: str
    asked_at: int
    state: QuestionState
    offered_batch: str | None = None


def ask(conn: Connection, request_id: str, customer_id: int, question: str) -> None:
    """Inside the reply's registration: keep the question; an earlier one nobody saw yet is
    superseded (the latest question is the one the buyer will answer)."""
    conn.execute(
        queries.pending_question.SUPERSEDE,
        {"s": QuestionState.SUPERSEDED, "c": customer_id, "p": QuestionState.PENDING},
    )
    conn.execute(
        queries.pending_question.RECORD,
        {"r": request_id, "c": customer_id, "q": question, "t": now_ms(), "p": QuestionState.PENDING},
    )


def offer(conn: Connection, customer_id: int, batch_id: str) -> PendingQuestion | None:
    """Inside the turn's first write: the question this batch's turn is offered, if any (marked
    offered to it, so a retry of the batch gets it again and a later batch does not). Never the
    batch that asked it: its follow-up after a crash is not the buyer's answer."""
    params = {"c": customer_id, "p": QuestionState.PENDING, "o": QuestionState.OFFERED, "b": batch_id}
    row = conn.execute(_OFFERABLE, params).mappings().first()
    if row is None:
        return None
    question = PendingQuestion.model_validate(dict(row))
    if question.state == QuestionState.PENDING:
        conn.execute(
            queries.pending_question.MARK_OFFERED,
            {"o": QuestionState.OFFERED, "b": batch_id, "r": question.request_id},
        )
    return question


def question_note(question: PendingQuestion, clock: ConversationClock, zone: ZoneInfo) -> str:
    """The line before the buyer's lines: what was asked, when (in the conversation's time)."""
    asked = shop_time(clock.shown(question.asked_at), zone)
    return f"[kefu] 你在 {asked} 问过顾客：「{question.question}」。下面顾客的消息可能是对这个问题的回答。"
