"""Customer summaries for operators (SPEC 3.4): real and simulated rows never mix; each
reader's watermark only moves forward, so two consoles acking out of order lose nothing."""

from __future__ import annotations

import sqlite3
import threading
import weakref
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from runtime.customers.outside_text import search_text
from runtime.errors import CustomerUnknown, KefuError
from runtime.store import DeliveryStore, now_ms
from runtime.store.connection import Connection
from runtime.store.sql import sql

Source = Literal["real", "simulation"]
SOURCES: tuple[Source, ...] = ("real", "simulation")


def parse_source(value: str) -> Source:
    """An operator's `--source`: every list and report shows one source, never both (SPEC 3.13)."""
    for source in SOURCES:
        if value == source:
            return source
    raise KefuError(
        "KEFU_INVALID_INPUT",
        f"--source must be real or simulation, not {value[:40]!r}",
        "leave it out for real rows, or pass --source simulation",
    )


def of_source(account_column: str) -> str:
    """A WHERE term keeping one source's rows: a row is simulated when its account is (an
    account unknown here counts as real, as alerts do). Bind `:sim` with `source_param`; None
    keeps both. Every report that keeps the two apart says it this one way."""
    return f"(:sim IS NULL OR ({account_column} IN (SELECT id FROM account WHERE simulated = 1)) = :sim)"


def source_param(source: Source | None) -> bool | None:
    """The `:sim` of an `of_source` term."""
    return None if source is None else source == "simulation"


def simulated_customer_ids(conn: Connection) -> set[int]:
    """Customers of simulated accounts: what keeps stores that know no accounts (memory, session
    logs) apart by source."""
    query = sql(f"SELECT c.id FROM customer c WHERE {of_source('c.account_id')}")
    return {int(c) for c in conn.execute(query, {"sim": True}).scalars()}


class CustomerSummary(BaseModel):
    id: int
    account_id: str
    conversation_id: str
    conversation_type: str
    title: str | None
    last_activity_at: int
    handling_paused: bool
    handling_reason: str | None
    name: str | None = None  # the buyer's display name, as their newest message gave it
    preview: str | None = None  # the start of the conversation's newest line
    unread: int  # counterpart messages newer than the reader's watermark

    @property
    def cursor(self) -> str:
        """Pass as `before` for the next page (newest activity first)."""
        return f"{self.last_activity_at}.{self.id}"


# What a message said, as a search sees it: text, a file's name, what a voice message was heard
# to say; never the JSON kefu keeps about media (a digest, a platform reference).
SAID = (
    "CASE WHEN m.content_type IN ('text', 'markdown') THEN m.body"
    " WHEN NOT json_valid(m.body) THEN (CASE WHEN m.content_type = 'file' THEN m.body END)"
    " WHEN m.content_type = 'file' THEN json_extract(m.body, '$.name')"
    " WHEN m.content_type = 'voice' THEN json_extract(m.body, '$.recognition') END"
)


def _literal(search: str) -> str:
    """A LIKE pattern matching `search` as a plain substring (`%` and `_` are not wildcards)."""
    escaped = search.replace("!", "!!").replace("%", "!%").replace("_", "!_")
    return f"%{escaped}%"


def list_customers(
    store: DeliveryStore,
    source: Source = "real",
    account_id: str | None = None,
    search: str | None = None,
    limit: int = 50,
    reader: str = "operator",
    before: str | None = None,
    paused: bool | None = None,
) -> list[CustomerSummary]:
    """Newest activity first; `before`, a row's `cursor`, pages on to any depth; `paused`: only
    customers a human handles (True) or the agent does (False); `search`, as typed (see
    `search_text`; blank is no search), finds names, titles and what was said."""
    at, last_id = _parse_cursor(before)
    if search is not None and search.strip():
        search = search_text(search)
        if not search:
            return []  # only control characters were typed: nothing says them
    else:
        search = None
    with store.read() as conn:
        found = conn.execute(
            sql(
                # The page's rows first (newest activity first), then their names and newest lines.
                "SELECT c.*,"
                " (SELECT m.sender_name FROM inbound_message m WHERE m.customer_id = c.id"
                "  AND m.sender_role = 'external' ORDER BY m.id DESC LIMIT 1) AS name,"
                " (SELECT CASE WHEN m.content_type IN ('text', 'markdown') THEN substr(m.body, 1, 80)"
                "  ELSE '[' || m.content_type || ']' END FROM inbound_message m WHERE m.customer_id = c.id"
                "  AND m.sender_role NOT IN ('ai', 'operator-dm') ORDER BY m.id DESC LIMIT 1) AS preview"
                " FROM (SELECT c.id, c.account_id, c.conversation_id, c.conversation_type, c.title,"
                "  c.last_activity_at, c.handling_paused, c.handling_reason"
                "  FROM customer c JOIN account a ON a.id = c.account_id"
                "  WHERE a.simulated = :sim AND (:a IS NULL OR c.account_id = :a)"
                "  AND (:at IS NULL OR c.last_activity_at < :at OR (c.last_activity_at = :at AND c.id < :id))"
                "  AND (:paused IS NULL OR c.handling_paused = :paused)"
                "  AND (:q IS NULL OR coalesce(c.title, '') LIKE :q ESCAPE '!' OR c.conversation_id LIKE :q ESCAPE '!'"
                "   OR EXISTS (SELECT 1 FROM inbound_message m WHERE m.customer_id = c.id"
                f"    AND (m.sender_name LIKE :q ESCAPE '!' OR ({SAID}) LIKE :q ESCAPE '!')))"
                "  ORDER BY c.last_activity_at DESC, c.id DESC LIMIT :n) c"
                " ORDER BY c.last_activity_at DESC, c.id DESC"
            ),
            {
                "sim": source == "simulation",
                "a": account_id,
                "q": _literal(search) if search else None,
                "n": limit,
                "at": at,
                "id": last_id,
                "paused": paused,
            },
        ).mappings()
        rows = [dict(row) for row in found]
    unread = unread_counts(store).get(reader, [row["id"] for row in rows])
    return [CustomerSummary.model_validate({**row, "unread": unread[row["id"]]}) for row in rows]


def customer_of(store: DeliveryStore, account_id: str, conversation_id: str) -> int | None:
    """The customer of a conversation, once its first message is stored."""
    with store.read() as conn:
        found = conn.execute(
            sql("SELECT id FROM customer WHERE account_id = :a AND conversation_id = :c"),
            {"a": account_id, "c": conversation_id},
        ).scalar()
    return int(found) if found is not None else None


def display_name(store: DeliveryStore, customer_id: int) -> str | None:
    """A conversation's name for people: a group's title, else the buyer's newest display name."""
    with store.read() as conn:
        name: str | None = conn.execute(
            sql(
                "SELECT coalesce(c.title, (SELECT m.sender_name FROM inbound_message m WHERE m.customer_id = c.id"
                " AND m.sender_role = 'external' ORDER BY m.id DESC LIMIT 1)) FROM customer c WHERE c.id = :c"
            ),
            {"c": customer_id},
        ).scalar()
    return name


def _parse_cursor(before: str | None) -> tuple[int | None, int | None]:
    if before is None:
        return None, None
    try:
        at, customer_id = before.split(".")
        return int(at), int(customer_id)
    except ValueError:
        raise KefuError(
            "KEFU_CURSOR_INVALID", f"{before[:40]!r} is not a customer list cursor", "pass the cursor a page ended with"
        ) from None


_UNREAD = (
    "SELECT c.id, (SELECT count(*) FROM inbound_message m"
    " WHERE m.customer_id = c.id AND m.sender_role IN ('external', 'human-native') AND m.id >"
    " coalesce((SELECT watermark FROM reader_watermark w WHERE w.customer_id = c.id AND w.reader = ?), 0))"
    " FROM customer c WHERE c.id IN ({ids})"
)


class UnreadCounts:
    """Unread counts per (reader, customer), reused within one delivery change sequence.

    The sequence is SQLite's `data_version` on a connection of this cache's own that never
    writes: it moves whenever any other connection, in any process, commits. So a new
    message, a reclassified sender or a moved watermark invalidates every count, and a list
    refreshed while nothing happened runs no count query. Only the customers asked for
    (the rows of one listing) are counted.
    """

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, timeout=10, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        self._sequence: int | None = None
        self._counts: dict[tuple[str, int], int] = {}
        self.computed = 0  # counts computed rather than reused

    def get(self, reader: str, customer_ids: list[int]) -> dict[int, int]:
        with self._lock:
            sequence = self._db.execute("PRAGMA data_version").fetchone()[0]
            if sequence != self._sequence:
                self._counts.clear()
                self._sequence = sequence
            missing = [c for c in customer_ids if (reader, c) not in self._counts]
            if missing:
                query = _UNREAD.format(ids=", ".join("?" * len(missing)))
                for customer_id, count in self._db.execute(query, [reader, *missing]):
                    self._counts[(reader, customer_id)] = count
                self.computed += len(missing)
            return {c: self._counts.get((reader, c), 0) for c in customer_ids}

    def close(self) -> None:
        self._db.close()


_caches: weakref.WeakKeyDictionary[DeliveryStore, UnreadCounts] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def unread_counts(store: DeliveryStore) -> UnreadCounts:
    """The store's unread cache (one per store object, closed with it)."""
    with _caches_lock:
        cache = _caches.get(store)
        if cache is None:
            cache = _caches[store] = UnreadCounts(store.path)
            weakref.finalize(store, cache.close)
        return cache


def ack_customer_read(store: DeliveryStore, customer_id: int, reader: str, watermark: int | None = None) -> int:
    """Advance `reader`'s watermark to an inbound message id (default: the newest). Max
    semantics: an older watermark never moves it back. Returns the stored watermark."""
    with store.write() as conn:
        known, newest = conn.execute(
            sql(
                "SELECT (SELECT 1 FROM customer WHERE id = :c),"
                " coalesce((SELECT max(id) FROM inbound_message WHERE customer_id = :c), 0)"
            ),
            {"c": customer_id},
        ).one()
        if known is None:
            raise CustomerUnknown(customer_id)
        target = newest if watermark is None else watermark
        if not 0 <= target <= newest:
            raise KefuError(
                "KEFU_WATERMARK_INVALID",
                f"watermark {watermark} is beyond customer {customer_id}'s messages (newest is {newest})",
                "pass an id no newer than that, or omit it to mark everything read",
            )
        stored: int = conn.execute(
            sql(
                "INSERT INTO reader_watermark (customer_id, reader, watermark, updated_at) VALUES (:c, :r, :w, :at)"
                " ON CONFLICT (customer_id, reader) DO UPDATE SET watermark = max(watermark, excluded.watermark),"
                " updated_at = excluded.updated_at RETURNING watermark"
            ),
            {"c": customer_id, "r": reader, "w": target, "at": now_ms()},
        ).scalar_one()
        return stored
