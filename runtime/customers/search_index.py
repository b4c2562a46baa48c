"""The index a conversation search reads (V32's `message_search`): what each message said, as
trigrams, so that a search of 10^6 messages reads the index, not every message's row.

Indexing each message as it is stored would cost ingest about half its speed, so the index is
brought up to the store's messages by a catch-up instead: before each search, and on beat's
retention round (worker.tasks.pipeline), in transactions of at most `BATCH` messages, each
moving the mark with the rows it indexed (message ids grow with receive order). What changes
under the mark (a message deleted or rewritten) V32's triggers follow in its own transaction.
"""

from __future__ import annotations

from runtime.store import DeliveryStore, queries

BATCH = 50_000  # messages per transaction: a first catch-up of 10^6 holds the write lock ~0.2 s at a time
TRIGRAM = 3  # the shortest search the index finds by itself; a shorter one scans the index's rows


def catch_up(store: DeliveryStore) -> int:
    """Index the messages stored since the last catch-up; returns how many."""
    indexed = 0
    while _behind(store):  # read first: a search with nothing new to index takes no write lock
        with store.write() as conn:
            mark = int(conn.execute(queries.message_search.INDEXED_THROUGH).scalar_one())
            last = conn.execute(queries.message_search.LAST_AFTER, {"after": mark, "n": BATCH}).scalar_one()
            if last is None:  # another catch-up came first
                break
            span = {"after": mark, "through": int(last)}
            indexed += conn.execute(queries.message_search.INDEX_AFTER, span).rowcount
            conn.execute(queries.message_search.MOVE_MARK, {"m": int(last)})
    return indexed


def _behind(store: DeliveryStore) -> bool:
    with store.read() as conn:
        return bool(conn.execute(queries.message_search.BEHIND).scalar_one())


def phrase(search: str) -> str:
    """An FTS5 phrase matching `search` as a plain substring: quoted, so no character in it is
    query syntax, and any `"` doubled."""
    return '"' + search.replace('"', '""') + '"'
