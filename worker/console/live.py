"""How the console's pages follow the store live: a conversation's transcript and controls, the
conversations list, and what needs the operator's attention (handoffs nobody took, new messages
in their own conversations) for the tab's badge and the browser's notifications.

Every live view is a server-sent event stream. What keeps them cheap at any number of open
tabs and conversations: one change sequence for the whole console (SQLite's `data_version`,
read at most every CHECK_EVERY_S however many streams ask), and a view is only read again after
the store changed; an event is only sent when what it would show differs from the last one.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import StreamingResponse

from runtime.store.connection import Connection, connect
from worker.console.streams import StreamSlots

POLL_S = 0.5  # how often a stream asks whether the store changed
CHECK_EVERY_S = 0.25  # how often the store is actually asked, for all streams together
STREAM_FOR_S = 25  # a stream ends after this and the browser reconnects: no stream outlives a shutdown long

Events = Callable[[], list[tuple[str, str]]]  # (event name, data) of what a view shows now


class StoreChanges:
    """The delivery store's change sequence: moves whenever any connection, in any process,
    commits. Read on a connection of its own that never writes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db: Connection | None = None
        self._checked_at = float("-inf")
        self._sequence = 0

    def sequence(self) -> int:
        with self._lock:
            now = time.monotonic()
            if now - self._checked_at >= CHECK_EVERY_S:
                if self._db is None:
                    self._db = connect(self.path, timeout_s=10)
                self._sequence = int(self._db.execute("PRAGMA data_version").scalar_one())
                self._checked_at = now
            return self._sequence


def digest(data: str) -> str:
    """What a page says it shows already (in its stream's `seen`), so the stream's first event
    does not replace it with the same: a view swapped under an operator's cursor loses a click."""
    return hashlib.blake2b(data.encode(), digest_size=8).hexdigest()


def seen_param(shown: dict[str, str]) -> str:
    return ",".join(f"{name}.{digest(data)}" for name, data in shown.items())


def _seen(request: Request) -> dict[str, str]:
    """The page's `seen`, as far as it is well formed (a few event names, each a digest)."""
    found: dict[str, str] = {}
    for part in request.query_params.get("seen", "")[:200].split(",")[:4]:
        name, _, hexdigest = part.partition(".")
        if name.isascii() and name.isalpha() and len(hexdigest) == 16:
            found[name] = hexdigest
    return found


def live_stream(
    request: Request, slots: StreamSlots, slot_owner: str, changes: StoreChanges, events: Events
) -> StreamingResponse:
    """`events` read again after each change of the store, each event sent when its data is new."""
    slot = slots.take(slot_owner)  # or 429

    async def stream() -> AsyncIterator[str]:
        with slots.holding(slot):
            sent = _seen(request)  # event -> digest of its data last sent (or shown by the page)
            seen: int | None = None
            ends = time.monotonic() + STREAM_FOR_S  # the reconnect signs in again: a disabled operator stops
            yield "retry: 500\n\n"
            while time.monotonic() < ends and not await request.is_disconnected():
                sequence = await run_in_threadpool(changes.sequence)
                if sequence != seen:
                    seen = sequence
                    for name, data in await run_in_threadpool(events):
                        if sent.get(name) != (now := digest(data)):
                            sent[name] = now
                            yield f"event: {name}\ndata: {json.dumps(data)}\n\n"
                await asyncio.sleep(POLL_S)

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)
