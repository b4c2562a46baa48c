"""The core's one clock: what time it is, in milliseconds since the epoch, for every rule of
runtime that reads the time (leases, fences, backoffs, retention, read checks …).

A test moves the whole core's clock at once (`clock_at`) rather than patching one module's
copy of `now_ms` or sleeping until a lease lapses; the shell (Celery's countdowns, the
listener's timers) keeps its own monotonic time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

_set_ms: int | None = None


def now_ms() -> int:
    return _set_ms if _set_ms is not None else time.time_ns() // 1_000_000


@contextmanager
def clock_at(ms: int) -> Iterator[None]:
    """Inside the block the core reads `ms` as now, in every thread of the process."""
    global _set_ms
    before, _set_ms = _set_ms, ms
    try:
        yield
    finally:
        _set_ms = before
