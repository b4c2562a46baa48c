"""A conversation's stored messages as labelled lines, paged backwards (`im_query_history`)."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from pydantic import BaseModel

from runtime.agent.rendering import RenderableMessage, render_line, shown
from runtime.agent.script_clock import REAL_TIME, ConversationClock
from runtime.store.connection import Connection
from runtime.store.sql import sql


class HistoryPage(BaseModel):
    lines: list[str]  # oldest first
    next_before: int | None  # pass as `before` for the page of older messages; None at the start


def query_history(
    conn: Connection,
    customer_id: int,
    limit: int,
    before: int | None,
    zone: ZoneInfo,
    clock: ConversationClock = REAL_TIME,
) -> HistoryPage:
    rows = (
        conn.execute(
            sql(
                "SELECT id, sender_role, sender_name, content_type, body, received_at, occurred_at FROM inbound_message"
                " WHERE customer_id = :c AND sender_role != 'operator-dm' AND (:before IS NULL OR id < :before)"
                " ORDER BY id DESC LIMIT :n"
            ),
            {"c": customer_id, "before": before, "n": limit + 1},
        )
        .mappings()
        .all()
    )
    page, more = rows[:limit], len(rows) > limit
    lines = [render_line(shown(RenderableMessage.model_validate(dict(row)), clock), zone) for row in reversed(page)]
    return HistoryPage(lines=lines, next_before=page[-1]["id"] if more else None)
