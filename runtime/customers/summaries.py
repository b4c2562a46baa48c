"""Customer summaries for operators (SPEC 3.4): real and simulated rows never mix; each
reader's watermark only moves forward, so two consoles acking out of order lose nothing."""

from __future__ import annotations

import json
import threading
import weakref
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from runtime.agent.rendering import content_text
from runtime.customers import search_index
from runtime.customers.outside_text import search_text
from runtime.errors import CustomerUnknown, KefuError
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection, connect
from runtime.store.states import ConversationStatus

Source = Literal["real", "simulation"]
SOURCES: tuple[Source, ...] = ("real", "simulation")
View = Literal["all", "mine", "unassigned"]  # whose conversations a list shows (`reader` is "me")
VIEWS: tuple[View, ...] = ("all", "mine", "unassigned")


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


def source_param(source: Source | None) -> bool | None:
    """The `:sim` of an `of_source` term."""
    return None if source is None else source == "simulation"


def simulated_customer_ids(conn: Connection) -> set[int]:
    """Customers of simulated accounts: what keeps stores that know no accounts (memory, session
    logs) apart by source."""
    return {int(c) for c in conn.execute(queries.customer.SIMULATED_IDS).scalars()}


PREVIEW_CHARS = 80


class CustomerSummary(BaseModel):
    id: int
    account_id: str
    conversation_id: str
    conversation_type: str
    title: str | None
    last_activity_at: int
    handling_paused: bool
    handling_reason: str | None
    assignee: str | None = None
    status: ConversationStatus = ConversationStatus.OPEN  # as it reads now
    snoozed_until: int | None = None
    name: str | None = None  # the buyer's display name, as their newest message gave it
    preview: str | None = None  # the start of the conversation's newest line, as the agent reads it
    session_id: str | None = None  # the agent's latest session of it
    unread: int  # counterpart messages newer than the reader's watermark

    @property
    def cursor(self) -> str:
        """Pass as `before` for the next page (newest activity first)."""
        return f"{self.last_activity_at}.{self.id}"


def like_escaped(text: str) -> str:
    """`text` for a LIKE pattern with `ESCAPE '!'`: its `%` and `_` are not wildcards."""
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")


def _literal(search: str) -> str:
    """A LIKE pattern matching `search` as a plain substring."""
    return f"%{like_escaped(search)}%"


def list_customers(
    store: DeliveryStore,
    source: Source = "real",
    account_id: str | None = None,
    search: str | None = None,
    limit: int = 50,
    reader: str = "operator",
    before: str | None = None,
    paused: bool | None = None,
    view: View = "all",
    status: ConversationStatus | None = None,
) -> list[CustomerSummary]:
    """Newest activity first; `before`, a row's `cursor`, pages on to any depth; `paused`: only
    customers a human handles (True) or the agent does (False); `view`: everyone's, the
    `reader`'s own (assigned to them) or nobody's; `status`: only those with it now; `search`,
    as typed (see `search_text`; blank is no search), finds names, titles and what was said."""
    at, last_id = _parse_cursor(before)
    if search is not None and search.strip():
        search = search_text(search)
        if not search:
            return []  # only control characters were typed: nothing says them
    else:
        search = None
    if search is not None:
        search_index.catch_up(store)
    indexed = search is not None and len(search) >= search_index.TRIGRAM
    with store.read() as conn:
        found = conn.execute(
            queries.customer.LIST_PAGE_MATCHED if indexed else queries.customer.LIST_PAGE,
            {
                "sim": source == "simulation",
                "a": account_id,
                "q": _literal(search) if search else None,
                "phrase": search_index.phrase(search) if search else None,
                "n": limit,
                "at": at,
                "id": last_id,
                "paused": paused,
                "view": None if view == "all" else view,
                "me": reader,
                "status": status,
                "now": now_ms(),
            },
        ).mappings()
        rows = [dict(row) for row in found]
    unread = unread_counts(store).get(reader, [row["id"] for row in rows])
    for row in rows:
        row["preview"] = _preview(row.pop("newest"))
    return [CustomerSummary.model_validate({**row, "unread": unread[row["id"]]}) for row in rows]


def _preview(newest: str | None) -> str | None:
    """The newest line's start: its text, or what it is (`[image]`, `[file 报价单.pdf, 120 KB]`,
    `[unsupported message type: sticker]`)."""
    if newest is None:
        return None
    content_type, body = json.loads(newest)
    return content_text(content_type, body or "")[:PREVIEW_CHARS]


class Attention(BaseModel):
    """What a reader's console tells them about, wherever they are: handoffs nobody has taken,
    and unread buyer messages in the conversations assigned to them."""

    waiting: dict[int, str]  # customer -> name, newest first
    mine_unread: dict[int, tuple[str, int]]  # customer -> (name, unread lines)

    @property
    def badge(self) -> int:
        return len(self.waiting) + sum(n for _, n in self.mine_unread.values())


ATTENTION_ROWS = 50  # a badge counts what a person can act on, not a backlog's size


def attention(store: DeliveryStore, reader: str) -> Attention:
    with store.read() as conn:
        waiting = {int(c): str(name) for c, name in conn.execute(queries.customer.WAITING_NAMED, {"n": ATTENTION_ROWS})}
        mine = {
            int(c): str(name)
            for c, name in conn.execute(queries.customer.ASSIGNED_NAMED, {"me": reader, "n": ATTENTION_ROWS})
        }
    unread = unread_counts(store).get(reader, list(mine))
    return Attention(waiting=waiting, mine_unread={c: (name, unread[c]) for c, name in mine.items() if unread[c]})


def parse_view(value: str) -> View:
    for view in VIEWS:
        if value == view:
            return view
    raise KefuError(
        "KEFU_INVALID_INPUT", f"the view must be all, mine or unassigned, not {value[:40]!r}", "pick one of those"
    )


def parse_status(value: str) -> ConversationStatus:
    try:
        return ConversationStatus(value)
    except ValueError:
        statuses = ", ".join(ConversationStatus)
        raise KefuError(
            "KEFU_INVALID_INPUT", f"the status must be one of {statuses}, not {value[:40]!r}", "pick one of those"
        ) from None


def customer_of(store: DeliveryStore, account_id: str, conversation_id: str) -> int | None:
    """The customer of a conversation, once its first message is stored."""
    with store.read() as conn:
        found = conn.execute(queries.customer.BY_CONVERSATION, (account_id, conversation_id)).scalar()
    return int(found) if found is not None else None


def display_name(store: DeliveryStore, customer_id: int) -> str | None:
    """A conversation's name for people: a group's title, else the buyer's newest display name."""
    with store.read() as conn:
        name: str | None = conn.execute(
            queries.customer.DISPLAY_NAME,
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


class UnreadCounts:
    """Unread counts per (reader, customer), reused within one delivery change sequence.

    The sequence is SQLite's `data_version` on a connection of this cache's own that never
    writes: it moves whenever any other connection, in any process, commits. So a new
    message, a reclassified sender or a moved watermark invalidates every count, and a list
    refreshed while nothing happened runs no count query. Only the customers asked for
    (the rows of one listing) are counted.
    """

    def __init__(self, path: Path) -> None:
        self._db = connect(path, timeout_s=10)
        self._lock = threading.Lock()
        self._sequence: int | None = None
        self._counts: dict[tuple[str, int], int] = {}
        self.computed = 0  # counts computed rather than reused

    def get(self, reader: str, customer_ids: list[int]) -> dict[int, int]:
        with self._lock:
            sequence = self._db.execute("PRAGMA data_version").scalar()
            if sequence != self._sequence:
                self._counts.clear()
                self._sequence = sequence
            missing = [c for c in customer_ids if (reader, c) not in self._counts]
            if missing:
                query = queries.customer.unread(len(missing))
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
            queries.customer.KNOWN_AND_NEWEST_MESSAGE,
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
            queries.reader_watermark.ADVANCE,
            {"c": customer_id, "r": reader, "w": target, "at": now_ms()},
        ).scalar_one()
        return stored
