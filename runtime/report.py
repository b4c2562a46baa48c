"""Which sent requests answer which inbound message: the delivery store's side of an audit."""

from __future__ import annotations

from collections import defaultdict

from runtime.store import DeliveryStore
from runtime.store.sql import sql


def requests_by_message(store: DeliveryStore, account_id: str) -> dict[tuple[str, str], list[str]]:
    """(conversation id, platform message id) → auto requests registered for its batch."""
    with store.read() as conn:
        rows = conn.execute(
            sql(
                "SELECT m.conversation_id, m.platform_message_id, o.request_id FROM inbound_message m"
                " LEFT JOIN outbox_request o ON o.customer_id = m.customer_id AND o.batch_id = m.batch_id"
                " WHERE m.account_id = :a AND m.sender_role IN ('external', 'human-native')"
            ),
            {"a": account_id},
        )
        result: dict[tuple[str, str], list[str]] = defaultdict(list)
        for conversation_id, platform_message_id, request_id in rows:
            result[(conversation_id, platform_message_id)]  # present even when unanswered
            if request_id is not None:
                result[(conversation_id, platform_message_id)].append(request_id)
    return dict(result)
