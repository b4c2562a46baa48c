"""A shop writing first (SPEC 3.8): a conversation the platform has not paged yet.

A manual send addresses a customer, and a customer is a conversation kefu has received
something of. A shop that writes first to a buyer (after an order, say) has nothing received:
it stores a specific direct route for the conversation, with the buyer as its platform peer
(`kefu routes add … --conversation C --peer P`), and opens the conversation from that route.
Replies then go to the last external sender observed in it, else the platform peer the
platform paged with it, else the route's peer (runtime.outbox.recipients); with none of them a
Wangwang send fails WANGWANG_DIRECT_RECIPIENT_UNAVAILABLE before any platform call.
"""

from __future__ import annotations

from runtime.errors import KefuError
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.tables import Route


def open_route_conversation(store: DeliveryStore, route_id: str) -> int:
    """The customer id of a specific direct route's conversation, opened now if nothing of it
    was received yet. Idempotent: a conversation already known (received, or opened before)
    keeps its customer and everything about it."""
    with store.write() as conn:
        row = conn.execute(queries.route.BY_ID, {"id": route_id}).mappings().first()
        if row is None:
            raise KefuError("KEFU_ROUTE_UNKNOWN", f"no route {route_id!r}", "see `kefu routes list`")
        route = Route.model_validate(dict(row))
        if route.conversation_type != "direct" or route.target != "specific" or route.conversation_id is None:
            raise KefuError(
                "KEFU_ROUTE_NOT_A_CONVERSATION",
                f"route {route_id!r} is not one direct conversation's route ({route.conversation_type},"
                f" {route.target}); only a specific direct route names a buyer to write to first",
                "add one with `kefu routes add ROUTE --account A --type direct --conversation C --peer BUYER`",
            )
        known = conn.execute(queries.customer.BY_CONVERSATION, (route.account_id, route.conversation_id)).scalar()
        if known is not None:
            return int(known)
        opened = conn.execute(
            queries.customer.UPSERT_FROM_GROUP,
            {
                "account_id": route.account_id,
                "conversation_id": route.conversation_id,
                "conversation_type": "direct",
                "title": None,
                "peer": None,  # the route's peer is read through the route: a change of it counts at once
                "at": now_ms(),
                "base": store.customer_id_base,
            },
        )
        return int(opened.mappings().one()["id"])
