"""An operator's direct message to the agent under test (seed 001 `injectSimulationOperator`):
a plain user message in the agent's session, never an IM line, never sent to the buyer.

It is stored as an inbound row of role `operator-dm` so that it goes the way every input goes:
durably accepted first (the returned id means accepted, not answered), admitted into a batch,
rendered into the turn without time or label (runtime.agent.rendering), and recovered like any
batch after a crash. It stays out of the conversation's IM history (`im_query_history`) and
out of the buyer-facing counts; the agent's answer is its text for operators, which the
transcript shows beside the message.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from runtime.admission.batches import load_customer
from runtime.agent.rendering import OPERATOR_DM
from runtime.agent.session_log import AssistantMessage, CorruptSessionLog, SessionLog, TurnEnd, TurnStart
from runtime.agent.sessions import session_path
from runtime.errors import CustomerUnknown, KefuError
from runtime.outbox.manual import check_request_id
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.states import BatchState, MessageState


class OperatorDmRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    customer_id: int
    request_id: str  # the same id with the same text is accepted once; other text is refused
    text: str = Field(min_length=1, max_length=4000)

    @field_validator("request_id")
    @classmethod
    def _request_id(cls, value: str) -> str:
        return check_request_id(value)


class OperatorDm(BaseModel):
    message_id: int
    customer_id: int
    request_id: str
    created: bool  # False: this request was accepted before (a retry)


def platform_message_id(request_id: str) -> str:
    return f"{OPERATOR_DM}:{request_id}"


def accept_operator_dm(store: DeliveryStore, request: OperatorDmRequest) -> OperatorDm:
    """Store the message for admission (the caller then asks for it: `Admit(customer_id)`).
    Refused for a real buyer's conversation, and while a human handles the conversation: the
    agent is not the one running it."""
    message_id = platform_message_id(request.request_id)
    with store.write() as conn:
        customer = load_customer(conn, request.customer_id)
        if customer is None:
            raise CustomerUnknown(request.customer_id)
        found = conn.execute(
            queries.inbound_message.BODY_BY_PLATFORM_ID,
            {"a": customer.account_id, "conv": customer.conversation_id, "m": message_id},
        ).first()
        if found is not None:
            found_id, found_text = found
            if found_text != request.text:
                raise KefuError(
                    "KEFU_REQUEST_ID_CONFLICT",
                    f"request {request.request_id!r} was accepted before with other text",
                    "use a new request id for a new message",
                )
            return OperatorDm(
                message_id=found_id, customer_id=request.customer_id, request_id=request.request_id, created=False
            )
        simulated = conn.execute(queries.account.SIMULATED, {"a": customer.account_id})
        if not simulated.scalar():  # a real buyer's conversation is no place to brief the agent
            raise KefuError(
                "KEFU_SIMULATION_REAL_ACCOUNT",
                f"customer {customer.id} is a real buyer; operator DMs go to simulated conversations",
                "kefu simulate operator-dm INSTANCE TEXT",
            )
        if customer.handling_paused:
            raise KefuError(
                "KEFU_HANDLING_PAUSED",
                f"customer {customer.id}'s conversation is handled by a human; the agent is not running it",
                f"kefu resume {customer.id}, then message the agent",
            )
        params = {
            "c": request.customer_id,
            "a": customer.account_id,
            "conv": customer.conversation_id,
            "m": message_id,
            "role": OPERATOR_DM,
            "body": request.text,
            "at": now_ms(),
        }
        new_id = conn.execute(queries.inbound_message.RECORD_OPERATOR_DM, params).scalar_one()
    return OperatorDm(message_id=new_id, customer_id=request.customer_id, request_id=request.request_id, created=True)


class DmAnswer(BaseModel):
    batch_id: str  # empty when no batch took the message
    outcome: str  # done | revoked (a human took over before the agent answered)
    texts: list[str]  # the agent's words to the operator, in order (empty: it only used tools)


def answer_of(store: DeliveryStore, sessions_dir: Path, dm: OperatorDm) -> DmAnswer | None:
    """What the agent answered, once the turn that took the message has ended; None before.
    Read from the customer's session log: the answer is never an IM line or a send."""
    with store.read() as conn:
        row = conn.execute(queries.inbound_message.ANSWERING_BATCH, {"m": dm.message_id}).first()
    if row is not None and row[0] == MessageState.SUPPRESSED:  # a human took over before it was admitted
        return DmAnswer(batch_id=row[1] or "", outcome="revoked", texts=[])
    if row is None or row[2] not in (BatchState.DONE, BatchState.REVOKED):
        return None
    _, batch_id, state, session_id = row
    texts: list[str] = []
    if state == BatchState.DONE and session_id is not None:
        try:
            events = SessionLog(session_path(sessions_dir, session_id)).load()
        except (CorruptSessionLog, OSError) as error:
            raise KefuError(
                "KEFU_SESSION_UNREADABLE", f"the agent's session log cannot be read ({type(error).__name__})"
            ) from None
        turns: set[str] = set()
        for event in events:
            if isinstance(event, TurnStart) and event.batch_id == batch_id:
                turns.add(event.turn)
            elif isinstance(event, TurnEnd):
                turns.discard(event.turn)
            elif turns and isinstance(event, AssistantMessage) and event.text.strip():
                texts.append(event.text.strip())
    return DmAnswer(batch_id=batch_id, outcome=state, texts=texts)
