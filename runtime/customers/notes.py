"""Operators' private notes on a conversation (issue 41): what one operator leaves for the next
("已退款，等快递单号"). A note is for the shop's team alone: it lives in its own table, which
nothing that sends, builds a transcript or gives the agent its history reads, so it is never
sent, never shown to the buyer and never part of a turn. Notes go with their customer: erased
with it (runtime.customers.erasure), moved with its account (runtime.placement.slices).
"""

from __future__ import annotations

from runtime.errors import CustomerUnknown, KefuError
from runtime.operators.accounts import record
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.tables import OperatorNote

BODY_MAX = 4000


def add_note(store: DeliveryStore, operator: str, customer_id: int, body: str) -> OperatorNote:
    """The note and its audit row in one transaction (the audit row names the note, never its words)."""
    text = body.strip()
    if not 1 <= len(text) <= BODY_MAX:
        raise KefuError(
            "KEFU_NOTE_INVALID", f"a note is 1-{BODY_MAX} characters, not {len(text)}", "write it shorter, or in two"
        )
    with store.write() as conn:
        params = {"c": customer_id, "o": operator, "b": text, "at": now_ms()}
        added = conn.execute(queries.operator_note.INSERT, params).mappings().first()
        if added is None:
            raise CustomerUnknown(customer_id)
        note = OperatorNote.model_validate(added)
        record(conn, operator, "note", customer_id, detail=f"note {note.id}")
    return note


def list_notes(store: DeliveryStore, customer_id: int) -> list[OperatorNote]:
    """The customer's notes, oldest first; KEFU_CUSTOMER_UNKNOWN for no such customer."""
    with store.read() as conn:
        rows = [
            OperatorNote.model_validate(r)
            for r in conn.execute(queries.operator_note.OF_CUSTOMER, {"c": customer_id}).mappings()
        ]
        if not rows and conn.execute(queries.customer.CONVERSATION_BY_ID, {"c": customer_id}).first() is None:
            raise CustomerUnknown(customer_id)
    return rows
