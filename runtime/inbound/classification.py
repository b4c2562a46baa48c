"""`classify_inbound_sender` (SPEC 3.3): who wrote an inbound message, decided by ids only.

A message whose platform id is that of a sent automatic outbox request is our own reply
echoed back (`ai`); one of a sent manual request is the console operator's (`human-console`).
That echo evidence wins over the provider's participant label. Otherwise the provider's
explicit native-operator evidence makes it `human-native`, and everything else is `external`.
Text equality never decides. Ingestion runs the same expression inside its insert.
"""

from __future__ import annotations

from typing import Literal

from runtime.store.connection import Connection
from runtime.store.sql import sql

SenderRole = Literal["ai", "human-console", "human-native", "external"]

# What the agent answers: the counterpart's and a native operator's lines, and an operator's
# direct message to the agent under test (`operator-dm`, runtime.agent.operator_dm: never from a
# platform, so never classified here). Admission, quiet checks and pending counts mean these.
AGENT_INPUT_ROLES = "('external', 'human-native', 'operator-dm')"

_ROLE = (
    "coalesce((SELECT CASE origin WHEN 'auto' THEN 'ai' ELSE 'human-console' END FROM outbox_request"
    " WHERE account_id = {account} AND platform_message_id = {message} AND state = 'sent' LIMIT 1), {evidence})"
)


def role_sql(account: str, message: str, evidence: str) -> str:
    """The classification as a SQL expression over the given placeholders or column references."""
    return _ROLE.format(account=account, message=message, evidence=evidence)


def evidence_role(provider_role: str) -> SenderRole:
    """What the provider's participant label alone says."""
    return "human-native" if provider_role == "native_operator" else "external"


def classify_inbound_sender(
    conn: Connection, account_id: str, platform_message_id: str, provider_role: str
) -> SenderRole:
    role: SenderRole = conn.execute(
        sql("SELECT " + role_sql(":a", ":m", ":e")),
        {"a": account_id, "m": platform_message_id, "e": evidence_role(provider_role)},
    ).scalar_one()
    return role
