"""How long kefu waits before it tries again: every retry schedule, by name, in one place.

Waits come in two lanes, and neither ever blocks a worker on the work itself:
- a wait that belongs to the work (a send the platform did not take, a model call that failed,
  an image the platform did not hand over, a listener's connection) is a countdown: a step
  returns a follow-up carrying it (runtime.pipeline), or the listener schedules its reconnect;
- a wait for a busy SQLite file is Celery's autoretry for a task (worker.tasks.base) or, while
  a store is being opened, a short loop in the opening process.

A schedule says how long each wait is and how many tries it allows; the caller decides what a
try is. The tunable ones (a model's backoff, a listener's reconnect) are built from settings.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Waits that grow by `factor` from `first_s`, at most `max_s`; `retries` tries again at
    most that often (None: the caller's deadline or budget bounds it)."""

    first_s: float
    factor: float = 2.0
    max_s: float | None = None
    retries: int | None = None

    def wait_s(self, retry: int, hint_s: float | None = None) -> float:
        """The wait before retry number `retry` (1 for the first), never shorter than the
        other side's hint (a 429's Retry-After, a throttling answer)."""
        wait = self.first_s * self.factor ** (retry - 1)
        if self.max_s is not None:
            wait = min(wait, self.max_s)
        return max(wait, hint_s or 0.0)

    def waits_s(self) -> Iterator[float]:
        """The waits in order, for a loop that tries until its deadline (or its retries)."""
        retry = 1
        while self.retries is None or retry <= self.retries:
            yield self.wait_s(retry)
            retry += 1


@dataclass(frozen=True)
class Steps:
    """Waits given one by one, where a curve would not say it as plainly; as many retries as waits."""

    waits: tuple[float, ...]

    @property
    def retries(self) -> int:
        return len(self.waits)

    def wait_s(self, retry: int, hint_s: float | None = None) -> float:
        return max(self.waits[min(retry, self.retries) - 1], hint_s or 0.0)

    def waits_s(self) -> Iterator[float]:
        return iter(self.waits)


# A send the platform did not take (`not-submitted`: never a send whose result is unknown).
SEND_NOT_SUBMITTED = Steps((1, 2, 5, 10, 30, 60))

# A buyer's image the platform did not hand over: the fetch task's own retries first …
MEDIA_FETCH = Steps((5, 10))
# … then the reconciler leaves it alone until this long after the failure, so a platform that
# is down is not asked again on every pass (30 s, then 2 min).
IMAGE_RESCUE = Backoff(first_s=30, factor=4)

# A task whose SQLite file stayed busy past its busy timeout: Celery's autoretry, with jitter
# (1 s, 2 s, 4 s … at most a minute between tries). A failed acks-late task is acked, and a
# pushed page would be gone with it, so a busy file is tried again, never failed.
TASK_STORE_BUSY = Backoff(first_s=1, factor=2, max_s=60, retries=20)

# A memory job while a turn holds the customer's session: archive after the turn.
MEMORY_SESSION_BUSY = Backoff(first_s=5, factor=1, retries=100)

# Opening a delivery store another process is migrating: until the migration budget is spent.
STORE_MIGRATION_BUSY = Backoff(first_s=0.01, factor=2, max_s=0.5)
# Opening a memory store another process holds locked: until its deadline.
MEMORY_STORE_LOCKED = Backoff(first_s=0.1, factor=1)

# Quick tries of BEGIN IMMEDIATE while another connection of the file writes, before SQLite's
# own busy timeout takes over: short, so a write waits for a write, not for a timer.
STORE_WRITE_BUSY = Steps((0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.0005, *(0.001,) * 8, *(0.002,) * 10))

# A platform that throttles a send without saying for how long (the send's wait is at least
# this): DingTalk's per-second QPS limit clears within a second, its flow control in a minute.
THROTTLED_HINT_S = 1.0
FLOW_CONTROL_HINT_S = 60.0


def model_call(retry_backoff_s: float) -> Backoff:
    """A model call that failed transiently (KEFU_AGENT__OPENAI__RETRY_BACKOFF_S, doubling); the
    provider's Retry-After is the hint. Its tries are KEFU_AGENT__OPENAI__MAX_ATTEMPTS."""
    return Backoff(first_s=retry_backoff_s, factor=2)


def listener_reconnect(initial_ms: int, max_ms: int) -> Backoff:
    """A listener whose connection failed (KEFU_LISTENER__RECONNECT_INITIAL_MS, doubling, at most
    …_MAX_MS); its budget of failures is the listener policy's (runtime.accounts.listener_policy)."""
    return Backoff(first_s=initial_ms / 1000, factor=2, max_s=max_ms / 1000)
