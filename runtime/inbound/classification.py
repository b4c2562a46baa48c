"""`classify_inbound_sender` (SPEC 3.3): who wrote an inbound message, decided by ids only.

A message whose platform id is that of a sent automatic outbox request is our own reply
echoed back (`ai`); one of a sent manual request is the console operator's (`human-console`).
That echo evidence wins over the provider's participant label. Otherwise the provider's
explicit native-operator evidence makes it `human-native`, and everything else is `external`.
Text equality never decides. Ingestion runs the same expression inside its insert
(runtime.store.queries.inbound_message.sender_role).
"""

from __future__ import annotations

from typing import Literal

from runtime.store import queries
from runtime.store.connection import Connection

SenderRole = Literal["ai", "human-console", "human-native", "external"]


def evidence_role(provider_role: str) -> SenderRole:
    """What the provider's participant label alone says."""
    return "human-native" if provider_role == "native_operator" else "external"


def classify_inbound_sender(
    conn: Connection, account_id: str, platform_message_id: str, provider_role: str
) -> SenderRole:
    role: SenderRole = conn.execute(
        queries.inbound_message.CLASSIFY_SENDER,
        {"a": account_id, "m": platform_message_id, "e": evidence_role(provider_role)},
    ).scalar_one()
    return role
