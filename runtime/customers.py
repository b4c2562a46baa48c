"""Customer summaries for operators (SPEC 3.4): real and simulated rows never mix."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from runtime.store import DeliveryStore
from runtime.store.sql import sql


class CustomerSummary(BaseModel):
    id: int
    account_id: str
    conversation_id: str
    conversation_type: str
    title: str | None
    last_activity_at: int
    handling_paused: bool
    handling_reason: str | None


def _literal(search: str) -> str:
    """A LIKE pattern matching `search` as a plain substring (`%` and `_` are not wildcards)."""
    escaped = search.replace("!", "!!").replace("%", "!%").replace("_", "!_")
    return f"%{escaped}%"


def list_customers(
    store: DeliveryStore,
    source: Literal["real", "simulation"] = "real",
    account_id: str | None = None,
    search: str | None = None,
    limit: int = 50,
) -> list[CustomerSummary]:
    with store.read() as conn:
        rows = conn.execute(
            sql(
                "SELECT c.id, c.account_id, c.conversation_id, c.conversation_type, c.title, c.last_activity_at,"
                " c.handling_paused, c.handling_reason FROM customer c JOIN account a ON a.id = c.account_id"
                " WHERE a.simulated = :sim AND (:a IS NULL OR c.account_id = :a)"
                " AND (:q IS NULL OR coalesce(c.title, '') LIKE :q ESCAPE '!' OR c.conversation_id LIKE :q ESCAPE '!'"
                "  OR EXISTS (SELECT 1 FROM inbound_message m WHERE m.customer_id = c.id"
                "   AND m.sender_name LIKE :q ESCAPE '!'))"
                " ORDER BY c.last_activity_at DESC LIMIT :n"
            ),
            {"sim": source == "simulation", "a": account_id, "q": _literal(search) if search else None, "n": limit},
        ).mappings()
        return [CustomerSummary.model_validate(dict(row)) for row in rows]
