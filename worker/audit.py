"""Did every buyer message get exactly one reply? Computed from the delivery store and the
simulated platform's own ledger of received sends, never from counters a caller keeps."""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel

from runtime.report import requests_by_message
from runtime.store import DeliveryStore
from transports.simulator import SimulatedPlatform
from transports.simulator.transport import platform_message_id


class Audit(BaseModel):
    buyer_messages: int
    answered: int
    duplicate_replies: int
    lost: int

    @property
    def clean(self) -> bool:
        return self.answered == self.buyer_messages and self.duplicate_replies == 0 and self.lost == 0

    def line(self) -> str:
        return (
            f"demo: {self.buyer_messages} buyer messages, {self.answered} answered, "
            f"{self.duplicate_replies} duplicate replies, {self.lost} lost"
        )


def audit(store: DeliveryStore, platform: SimulatedPlatform, account_id: str) -> Audit:
    by_message = requests_by_message(store, account_id)
    sends = platform.received(account_id)
    sends_per_request = Counter(send.client_ref for send in sends)
    buyer = platform.buyer_messages(account_id)
    answered, lost = 0, 0
    replied_batches: set[frozenset[str]] = set()
    for message in buyer:
        requests = by_message.get((message.conversation_id, platform_message_id(message.seq)))
        if requests and any(sends_per_request[r] for r in requests):
            answered += 1
            replied_batches.add(frozenset(requests))
        else:
            lost += 1  # never stored, or stored and never answered
    # One reply per answered batch is expected; every other platform send is a duplicate.
    return Audit(
        buyer_messages=len(buyer), answered=answered, duplicate_replies=len(sends) - len(replied_batches), lost=lost
    )
