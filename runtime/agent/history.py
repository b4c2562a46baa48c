"""A conversation's stored messages as labelled lines, paged backwards (`im_query_history`)."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from pydantic import BaseModel

from runtime.agent.rendering import RenderableMessage, render_line, shown
from runtime.agent.script_clock import REAL_TIME, ConversationClock
from runtime.store import queries
from runtime.store.connection import Connection


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
    params = {"c": customer_id, "before": before, "n": limit + 1}
    rows = conn.execute(queries.inbound_message.HISTORY_PAGE, params).mappings().all()
    page, more = rows[:limit], len(rows) > limit
    lines = [render_line(shown(RenderableMessage.model_validate(dict(row)), clock), zone) for row in reversed(page)]
    return HistoryPage(lines=lines, next_before=page[-1]["id"] if more else None)
