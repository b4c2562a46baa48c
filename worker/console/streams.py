"""How many live event streams the console keeps open: each polls the store twice a second on
the shared thread pool, so an unbounded number of them (one viewer opening a thousand tabs or
requests) would starve every page and `/healthz`. Bounded per signed-in session and in all;
past either bound a new stream is refused with 429 (the page still works, without live
updates, and the browser tries again)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from contextlib import contextmanager

from starlette.exceptions import HTTPException

PER_SESSION = 8  # a browser opens one per conversation tab
IN_ALL = 200
HELD_AT_MOST_S = 60.0  # a stream ends after 25 s: a slot a stream never released frees itself after this


class StreamSlots:
    """Slots for live streams, taken when a stream is asked for and given back when it ends. One
    event loop's: no lock."""

    def __init__(self, per_session: int = PER_SESSION, in_all: int = IN_ALL) -> None:
        self.per_session, self.in_all = per_session, in_all
        self._held: dict[int, tuple[str, float]] = {}  # slot -> (session, taken at)
        self._numbers = itertools.count()

    def take(self, session: str) -> int:
        """A slot for `session`'s new stream, or 429."""
        now = time.monotonic()
        self._held = {slot: held for slot, held in self._held.items() if now - held[1] < HELD_AT_MOST_S}
        mine = sum(1 for owner, _ in self._held.values() if owner == session)
        if mine >= self.per_session or len(self._held) >= self.in_all:
            raise HTTPException(
                429, "KEFU_TOO_MANY_STREAMS: too many live views open; close some tabs (this one updates on reload)"
            )
        slot = next(self._numbers)
        self._held[slot] = (session, now)
        return slot

    def give_back(self, slot: int) -> None:
        self._held.pop(slot, None)

    @contextmanager
    def holding(self, slot: int) -> Iterator[None]:
        try:
            yield
        finally:
            self.give_back(slot)
