"""Which requests answer which inbound message: the delivery store's side of an audit and of a
simulation's report."""

from __future__ import annotations

from collections import defaultdict

from pydantic import BaseModel

from runtime.store import DeliveryStore, queries


def requests_by_message(store: DeliveryStore, account_id: str) -> dict[tuple[str, str], list[str]]:
    """(conversation id, platform message id) → auto requests registered for its batch."""
    with store.read() as conn:
        rows = conn.execute(queries.inbound_message.REQUESTS_BY_MESSAGE, {"a": account_id})
        result: dict[tuple[str, str], list[str]] = defaultdict(list)
        for conversation_id, platform_message_id, request_id in rows:
            result[(conversation_id, platform_message_id)]  # present even when unanswered
            if request_id is not None:
                result[(conversation_id, platform_message_id)].append(request_id)
    return dict(result)


class ConversationOutcome(BaseModel):
    """What became of one conversation's buyer messages, from the store alone (a simulation
    report reads it; a reply is tied to the message by its batch, never by timing)."""

    stored: set[str]  # platform message ids of its counterpart lines
    batch_of: dict[str, str]  # platform message id -> the admission batch that took it
    requests_of: dict[str, list[str]]  # batch id -> its automatic requests, in order
    states: dict[str, str]  # request id -> outbox state
    handed_off: bool  # the agent asked for a human
    settled: bool  # nothing in flight: no batch before its turn ends, no reply waiting to go out
    waiting: int  # counterpart lines not yet taken by a batch (a group's until its trigger)


def conversation_outcome(store: DeliveryStore, account_id: str, conversation_id: str) -> ConversationOutcome:
    with store.read() as conn:
        found = conn.execute(queries.customer.HANDOFF_BY_CONVERSATION, {"a": account_id, "c": conversation_id}).first()
        if found is None:
            return ConversationOutcome(
                stored=set(), batch_of={}, requests_of={}, states={}, handed_off=False, settled=True, waiting=0
            )
        customer_id, handed_off = found
        messages = conn.execute(queries.inbound_message.COUNTERPART_LINES, {"c": customer_id}).all()
        requests = conn.execute(queries.outbox_request.AUTO_OF_CUSTOMER, {"c": customer_id}).all()
        busy = conn.execute(queries.inbound_message.CUSTOMER_BUSY, {"c": customer_id}).first()
    requests_of: dict[str, list[str]] = defaultdict(list)
    for request_id, batch_id, _ in requests:
        if batch_id is not None:
            requests_of[batch_id].append(request_id)
    return ConversationOutcome(
        stored={message_id for message_id, _, _ in messages},
        batch_of={message_id: batch_id for message_id, batch_id, _ in messages if batch_id is not None},
        requests_of=dict(requests_of),
        states={request_id: state for request_id, _, state in requests},
        handed_off=bool(handed_off),
        settled=busy is None,
        waiting=sum(state == "pending" for _, _, state in messages),
    )
