"""Holding a shard's lease in a kefu process (SPEC 3.12).

A worker, a beat, `kefu listen` and an operator command all serve the shard of their settings
only while their instance holds its lease (worker.coordination). The first process of an
instance takes it; the others of the same instance join that grant (same fencing token), so
a host's processes work side by side. A process of another instance is a standby: a worker,
beat or listener waits before it consumes, schedules, listens or opens the store, and takes
over when the lease lapses; an operator command refuses (KEFU_SHARD_HELD_ELSEWHERE).

The holder renews every quarter of the lease. A renewal refused (another owner has it) or
missing for 80 % of the lease loses it locally before it can expire in Redis: the guard stops
every write of this process and its forked children (runtime.shards), and the process shuts
down. Its supervisor restarts it, and it waits as a standby.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
import time
from collections.abc import Callable

from config import Settings
from runtime.shards import ShardGuard, ShardHeldElsewhere, ShardLeaseLost
from worker.coordination import Coordinator, Grant, coordinator_for

log = logging.getLogger(__name__)

KEEP_FRACTION = 0.8  # of the lease after a renewal was sent: then writes stop


def _terminate() -> None:
    """The default on a lost lease: a warm shutdown of this process (running tasks stop at
    their next write and go back to the queue)."""
    os.kill(os.getpid(), signal.SIGTERM)


class ShardHolder:
    def __init__(self, settings: Settings, coordinator: Coordinator, on_lost: Callable[[], None]) -> None:
        self.shard = settings.shard
        self.owner = settings.instance
        self.coordinator = coordinator
        self.guard = ShardGuard(self.shard, self.owner)
        self.ttl_ms = int(settings.shard_lease_s * 1000)
        self.took_it = False  # this process made a new grant (not joined its instance's): it releases
        self.pid = os.getpid()
        self._on_lost = on_lost
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _granted(self, grant: Grant, sent_ns: int) -> None:
        self.guard.hold(grant.token, sent_ns + int(self.ttl_ms * KEEP_FRACTION * 1_000_000))
        self.took_it |= grant.new

    def acquire(self, wait: bool) -> None:
        """Take or join the lease. Another instance holding it: wait as a standby (announced,
        so `kefu shards` lists it) or, without `wait`, refuse."""
        waiting_since: float | None = None
        while True:
            sent = time.monotonic_ns()
            try:
                grant = self.coordinator.grant(self.shard, self.owner, self.ttl_ms)
            except Exception as error:
                if not wait:
                    raise
                log.warning(
                    "shard %s: the lease cannot be asked for (%s); trying again", self.shard, type(error).__name__
                )
                time.sleep(1)
                continue
            if grant is not None:
                self._granted(grant, sent)
                if waiting_since is not None:
                    log.warning(
                        "shard %s: took over the lease after %.1f s as a standby",
                        self.shard,
                        time.monotonic() - waiting_since,
                    )
                log.info("shard %s: lease held by %s, token %d", self.shard, self.owner, grant.token)
                return
            holder = self.coordinator.holder(self.shard)
            if not wait:
                raise ShardHeldElsewhere(self.shard, holder.owner if holder else "another instance")
            if waiting_since is None:
                waiting_since = time.monotonic()
                log.warning(
                    "shard %s: standby; instance %s holds the lease, this one takes over when it lapses",
                    self.shard,
                    holder.owner if holder else "another",
                )
            self.coordinator.announce_standby(self.shard, self.owner, 3 * self.ttl_ms)
            time.sleep(min(1.0, self.ttl_ms / 4000))

    def start_renewing(self) -> None:
        self._thread = threading.Thread(target=self._renew, name=f"kefu-shard-{self.shard}", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        interval_s = self.ttl_ms / 4000
        wait_s = interval_s
        while not self._stop.wait(wait_s):
            if self.guard.lost:  # a write of this process or a child found a newer grant in the store
                break
            sent = time.monotonic_ns()
            try:
                grant = self.coordinator.grant(self.shard, self.owner, self.ttl_ms)
            except Exception as error:
                log.warning("shard %s: renewing the lease failed (%s)", self.shard, type(error).__name__)
                try:
                    self.guard.require()
                except ShardLeaseLost:
                    break
                wait_s = min(interval_s, 0.5)
                continue
            if grant is None:
                self.guard.lose()
                break
            self._granted(grant, sent)
            wait_s = interval_s
        if self._stop.is_set():
            return
        self.guard.lose()
        log.error("kefu: %s", ShardLeaseLost(self.shard, "another instance holds it, or it went unrenewed"))
        self._on_lost()

    def stop(self) -> None:
        """Stop renewing; release the lease if this process took it and still holds it."""
        if os.getpid() != self.pid:  # a forked child: its parent holds the lease
            return
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if self.took_it and not self.guard.lost:
            try:
                self.coordinator.release(self.shard, self.owner)
            except Exception as error:  # it lapses by itself
                log.warning("shard %s: releasing the lease failed (%s)", self.shard, type(error).__name__)
        self.guard.lose()


_holder: ShardHolder | None = None


def hold_shard(settings: Settings, wait: bool = True, on_lost: Callable[[], None] = _terminate) -> ShardHolder:
    """This process's hold on its shard: taken (or joined) once, and renewed until exit. A
    forked child (a prefork pool process, the embedded beat) shares its parent's."""
    global _holder
    if _holder is not None and _holder.shard == settings.shard and not _holder.guard.lost:
        return _holder
    holder = ShardHolder(settings, coordinator_for(settings), on_lost)
    holder.acquire(wait)
    holder.start_renewing()
    atexit.register(holder.stop)
    _holder = holder
    return holder


def process_guard(settings: Settings) -> ShardGuard:
    """The guard a store of this process writes under; a process that holds nothing yet (an
    operator command) joins its instance's grant or takes a free lease, and never waits."""
    return hold_shard(settings, wait=False).guard


def release_shard() -> None:
    global _holder
    if _holder is not None:
        _holder.stop()
        _holder = None
