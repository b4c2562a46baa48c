"""A conversation's place in the shop team's inbox: who it is assigned to, and its status.

- open: the default; the agent or an operator is on it.
- waiting: the agent handed off and nobody has taken it (runtime.admission.handling sets it):
  the shop's buyers are judged on response time, so this is what the team must see first.
- resolved: an operator closed it; the agent handles it again. The buyer's next message
  reopens it.
- snoozed: out of the open list until a time, or the buyer's next message, whichever is first.

Reopening is read, not written (queries.customer.effective_status): nothing on the message path
has to remember to reopen a conversation, and a snooze ends on time without a timer.

Taking over assigns the conversation to the operator who took it, in the same transaction as
the pause; assigning on its own only says who looks after it (the agent keeps answering until
somebody takes over). Every change is recorded as the operator's action in the same transaction.
"""

from __future__ import annotations

from pydantic import BaseModel

from runtime.admission.handling import clip_reason, pause_in, resume_in
from runtime.errors import CustomerUnknown, KefuError
from runtime.operators.accounts import record
from runtime.operators.roles import Role
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection
from runtime.store.states import ConversationStatus


class Assignment(BaseModel):
    customer_id: int
    assignee: str | None
    status: ConversationStatus  # as it reads now: reopened by the buyer or the snooze's end
    snoozed_until: int | None
    handling_paused: bool
    handling_reason: str | None


def assignment(store: DeliveryStore, customer_id: int) -> Assignment:
    with store.read() as conn:
        return _assignment(conn, customer_id)


def take_over(store: DeliveryStore, customer_id: int, operator: str, reason: str = "") -> Assignment:
    """The operator answers from now on: automatic handling pauses and the conversation is
    theirs. Another operator's conversation is refused (KEFU_CONVERSATION_TAKEN): a second
    take-over would silently keep the first one's reason and hide who answers. Taking over one's
    own again changes nothing."""
    with store.write() as conn:
        now = _assignment(conn, customer_id)
        _check_may_answer(conn, operator)
        if now.handling_paused and now.status != ConversationStatus.WAITING and now.assignee is not None:
            if now.assignee == operator:
                return now
            raise KefuError(
                "KEFU_CONVERSATION_TAKEN",
                f"{now.assignee} already handles customer {customer_id} ({now.handling_reason or '-'})",
                f"ask {now.assignee}, or have the conversation assigned to you (kefu assign {customer_id} {operator})",
            )
        # A handoff keeps the agent's reason: it says what the buyer needs. Who took it is the assignee.
        reason = clip_reason(reason.strip()) or (now.handling_reason if now.handling_paused else None) or "taken over"
        if now.handling_paused:
            conn.execute(queries.customer.TAKE_PAUSED, {"c": customer_id, "o": operator, "r": reason, "at": now_ms()})
        else:
            pause_in(conn, customer_id, reason)
            conn.execute(queries.customer.ASSIGN, {"c": customer_id, "o": operator})
        record(conn, operator, "take-over", customer_id, reason)
        return _assignment(conn, customer_id)


def hand_back(store: DeliveryStore, customer_id: int, operator: str) -> Assignment:
    """The agent answers new messages again; the conversation stays assigned (for reports and
    for whoever looks after it)."""
    with store.write() as conn:
        _assignment(conn, customer_id)
        resume_in(conn, customer_id)
        record(conn, operator, "hand-back", customer_id)
        return _assignment(conn, customer_id)


def assign(store: DeliveryStore, customer_id: int, assignee: str | None, by: str) -> Assignment:
    """Give the conversation to `assignee` (an enabled operator who may answer), or to nobody.
    A conversation an operator took over moves to the new assignee with its pause."""
    with store.write() as conn:
        _assignment(conn, customer_id)
        if assignee is not None:
            _check_may_answer(conn, assignee)
        conn.execute(queries.customer.ASSIGN, {"c": customer_id, "o": assignee})
        record(conn, by, "assign", customer_id, assignee or "-")
        return _assignment(conn, customer_id)


def resolve(store: DeliveryStore, customer_id: int, by: str) -> Assignment:
    """Close the conversation and hand it back to the agent: the buyer's next message is
    answered automatically and reopens it."""
    with store.write() as conn:
        _assignment(conn, customer_id)
        resume_in(conn, customer_id)
        _set_status(conn, customer_id, ConversationStatus.RESOLVED, None)
        record(conn, by, "resolve", customer_id)
        return _assignment(conn, customer_id)


def snooze(store: DeliveryStore, customer_id: int, until_ms: int, by: str) -> Assignment:
    """Out of the open list until `until_ms` (or the buyer's next message). Handling is as it
    was: a snooze is about the team's list, not about who answers."""
    at = now_ms()
    if until_ms <= at:
        raise KefuError("KEFU_INVALID_INPUT", "a snooze must end in the future", "give a later time")
    with store.write() as conn:
        _assignment(conn, customer_id)
        _set_status(conn, customer_id, ConversationStatus.SNOOZED, until_ms)
        record(conn, by, "snooze", customer_id, str(until_ms))
        return _assignment(conn, customer_id)


def reopen(store: DeliveryStore, customer_id: int, by: str) -> Assignment:
    with store.write() as conn:
        now = _assignment(conn, customer_id)
        waiting = now.handling_paused and now.status == ConversationStatus.WAITING
        _set_status(conn, customer_id, ConversationStatus.WAITING if waiting else ConversationStatus.OPEN, None)
        record(conn, by, "reopen", customer_id)
        return _assignment(conn, customer_id)


def _check_may_answer(conn: Connection, name: str) -> None:
    role = conn.execute(queries.operator.ENABLED_BY_NAME, {"n": name}).first()
    if role is None:
        raise KefuError(
            "KEFU_OPERATOR_UNKNOWN", f"no enabled operator is named {name[:64]!r}", "see kefu operators list"
        )
    if not Role(role[0]).allows(Role.OPERATOR):
        raise KefuError(
            "KEFU_ROLE_REQUIRED",
            f"{name} is a {role[0]}: a viewer cannot answer buyers",
            "name an operator or an admin",
        )


def _assignment(conn: Connection, customer_id: int) -> Assignment:
    row = conn.execute(queries.customer.ASSIGNMENT, {"c": customer_id, "now": now_ms()}).mappings().first()
    if row is None:
        raise CustomerUnknown(customer_id)
    return Assignment.model_validate(dict(row))


def _set_status(conn: Connection, customer_id: int, status: ConversationStatus, until: int | None) -> None:
    conn.execute(queries.customer.SET_STATUS, {"c": customer_id, "s": status, "at": now_ms(), "until": until})
