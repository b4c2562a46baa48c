"""`kefu memory report`: what the memory store holds, per customer, read without a worker."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from contextlib import closing
from pathlib import Path

from pydantic import BaseModel
from sqlalchemy.exc import DatabaseError

from runtime.memory.store import MemoryStoreUnreadable, sqlite_reason
from runtime.store.connection import Connection, connect


class ScopeReport(BaseModel):
    scope: str
    folders: int
    pending: int
    review: int
    heuristic: int
    llm: int
    high_alpha: int  # alpha >= 0.6
    events: int
    archives: int
    recalls: int
    chars: int


def customer_of(scope: str) -> int | None:
    """The customer a `customer-<id>` scope holds memory of (None: another kind of scope)."""
    prefix, _, number = scope.partition("-")
    return int(number) if prefix == "customer" and number.isdecimal() else None


def report(path: Path, only: Collection[int] | None = None, without: Collection[int] = ()) -> list[ScopeReport]:
    """Per scope. The memory store knows no accounts, so a caller that keeps real and simulated
    customers apart (SPEC 3.13) names them: `only` these customers' scopes, or every scope
    `without` those (a scope of no customer stays in)."""
    try:
        with read_only(path) as db:
            rows = db.execute(
                "SELECT scope, COUNT(*), SUM(scored = 0), SUM(review), SUM(score_source = 'heuristic'),"
                " SUM(score_source = 'llm'), SUM(scored = 1 AND alpha >= 0.6), COUNT(DISTINCT event), SUM(chars)"
                " FROM folder GROUP BY scope ORDER BY scope"
            ).fetchall()
            counts = Counter((scope, type) for scope, type in db.execute("SELECT scope, type FROM telemetry"))
    except DatabaseError as error:
        raise MemoryStoreUnreadable(path, sqlite_reason(error)) from None
    kept = [r for r in rows if _kept(customer_of(r[0]), only, without)]
    return [
        ScopeReport(
            scope=r[0],
            folders=r[1],
            pending=r[2],
            review=r[3],
            heuristic=r[4],
            llm=r[5],
            high_alpha=r[6],
            events=r[7],
            archives=counts[(r[0], "archive")],
            recalls=counts[(r[0], "recall")],
            chars=r[8],
        )
        for r in kept
    ]


def _kept(customer: int | None, only: Collection[int] | None, without: Collection[int]) -> bool:
    if only is not None:
        return customer in only
    return customer is None or customer not in without


def read_only(path: Path) -> closing[Connection]:
    """A read-only connection of the report's, self-check's and audit's own."""
    if not Path(path).exists():
        raise FileNotFoundError(f"no memory store at {path}")
    return closing(connect(path, 5.0, read_only=True))
