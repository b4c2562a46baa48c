"""Holding a shard's lease in a kefu process (SPEC 3.12).

A worker, a beat, `kefu listen` and an operator command all serve the shard of their settings
only while their instance holds its lease (worker.coordination). The first process of an
instance takes it; the others of the same instance join that grant (same fencing token), so
a host's processes work side by side. A process of another instance is a standby: a worker,
beat or listener waits before it consumes, schedules, listens or opens the store, and takes
over when the lease lapses; an operator command refuses (KEFU_SHARD_HELD_ELSEWHERE).

The holder renews every quarter of the lease. A renewal refused (another owner has it), one
that finds the lease lapsed meanwhile (a new grant: someone else may have held it in between),
or none for 80 % of the lease, loses it locally before it can expire in Redis: the guard stops
every write of this process and its forked children (runtime.placement.shards), and the process shuts
down. Its supervisor restarts it, and it waits as a standby. A process that stops cleanly lets
go; the lease goes once no other process of its instance is renewing it.

Redis only coordinates: it may lose the lease and the grant counter (no persistence, a failover
to an empty replica). The shard's store remembers the newest grant it has seen (its fence), so a
process asks for its grant with that as a floor, read from the store file; a grant below it
(the counter restarted at 1) would be refused by every write and the process would exit at its
first write, again and again. A renewal asks with its own token as the floor, and a renewal
that comes back with another token than ours (the lease was re-issued meanwhile) loses the lease
like a lapse does: after a Redis loss each process restarts at most once.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable

from config import Settings
from runtime.errors import KefuError
from runtime.placement.shards import ShardGuard, ShardHeldElsewhere, ShardLeaseLost, newest_grant
from worker.broker import broker_unreachable, wait_for_broker
from worker.coordination import Coordinator, Grant, coordinator_for

log = logging.getLogger(__name__)

KEEP_FRACTION = 0.8  # of the lease after a renewal was sent: then writes stop


def _terminate() -> None:
    """The default on a lost lease: a warm shutdown of this process (running tasks stop at
    their next write and go back to the queue)."""
    os.kill(os.getpid(), signal.SIGTERM)


class ShardHolder:
    def __init__(self, settings: Settings, coordinator: Coordinator, on_lost: Callable[[], None]) -> None:
        self.settings = settings
        self.shard = settings.shard
        self.owner = settings.instance
        self.coordinator = coordinator
        self.guard = ShardGuard(self.shard, self.owner)
        self.ttl_ms = int(settings.shard_lease_s * 1000)
        self.store_path = settings.delivery_path
        self.pid = os.getpid()
        self.member = f"{socket.gethostname()}:{self.pid}:{uuid.uuid4().hex[:8]}"  # among its instance's
        self._on_lost = on_lost
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _granted(self, grant: Grant, sent_ns: int) -> None:
        self.guard.hold(grant.token, sent_ns + int(self.ttl_ms * KEEP_FRACTION * 1_000_000))

    def acquire(self, wait: bool) -> None:
        """Take or join the lease. Another instance holding it: wait as a standby (announced,
        so `kefu shards` lists it) or, without `wait`, refuse."""
        waiting_since: float | None = None
        failing_since: float | None = None  # the coordination store has not answered since
        while True:
            sent = time.monotonic_ns()
            try:
                floor = newest_grant(self.store_path)
                grant = self.coordinator.grant(self.shard, self.owner, self.ttl_ms, self.member, floor)
            except KefuError:
                raise
            except Exception as error:
                if not wait:
                    raise
                now = time.monotonic()
                if failing_since is None:
                    failing_since = now
                    log.warning(
                        "shard %s: the lease cannot be asked for (%s); trying again for up to %g s",
                        self.shard,
                        type(error).__name__,
                        self.settings.broker_unreachable_s,
                    )
                elif now - failing_since >= self.settings.broker_unreachable_s:
                    raise self._unreachable(type(error).__name__) from None
                time.sleep(1)
                continue
            failing_since = None
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

    def _unreachable(self, reason: str) -> KefuError:
        """Startup gives up: the lease's store (Redis, or the coordination file) never answered."""
        if self.settings.redis_broker:
            return broker_unreachable(self.settings, f"asking for the shard lease: {reason}")
        return KefuError(
            "KEFU_COORDINATION_UNAVAILABLE",
            f"the shard lease in {self.settings.data_dir / 'coordination.sqlite'} could not be asked for within"
            f" {self.settings.broker_unreachable_s:g} s ({reason})",
            "see the warnings above; KEFU_BROKER_UNREACHABLE_S sets how long a process waits",
        )

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
            if sent >= self.guard.deadline_ns:  # stalled past it (a paused process): it may have lapsed
                break
            try:
                grant = self.coordinator.grant(self.shard, self.owner, self.ttl_ms, self.member, self.guard.token)
            except Exception as error:
                log.warning("shard %s: renewing the lease failed (%s)", self.shard, type(error).__name__)
                try:
                    self.guard.require()
                except ShardLeaseLost:
                    break
                wait_s = min(interval_s, 0.5)
                continue
            # Another instance has it, it lapsed in between, or it was issued again (Redis lost it):
            if grant is None or grant.new or grant.token != self.guard.token:
                break
            self._granted(grant, sent)
            wait_s = interval_s
        if self._stop.is_set():
            return
        self.guard.lose()
        log.error("kefu: %s", ShardLeaseLost(self.shard, "another instance holds it, or it went unrenewed"))
        self._on_lost()

    def stop(self) -> None:
        """Stop renewing and let go: the lease goes once no other process of the instance holds
        it (a worker restarting beside its instance's listener hands nothing to a standby)."""
        if os.getpid() != self.pid:  # a forked child: its parent holds the lease
            return
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if not self.guard.lost:
            try:
                self.coordinator.release(self.shard, self.owner, self.member)
            except Exception as error:  # it lapses by itself
                log.info("shard %s: releasing the lease failed (%s)", self.shard, type(error).__name__)
        self.guard.lose()


_holders: dict[tuple[str, str, str], ShardHolder] = {}


def _key(settings: Settings) -> tuple[str, str, str]:
    return settings.shard, str(settings.data_dir), settings.broker_url


def hold_shard(settings: Settings, wait: bool = True, on_lost: Callable[[], None] = _terminate) -> ShardHolder:
    """This process's hold on its shard: taken (or joined) once, and renewed until exit. A
    forked child (a prefork pool process, the embedded beat) shares its parent's."""
    held = _holders.get(_key(settings))
    if held is not None and not held.guard.lost:
        return held
    if wait:  # a process that serves the shard: a broker that never answers ends its startup
        wait_for_broker(settings)
    holder = ShardHolder(settings, coordinator_for(settings), on_lost)
    holder.acquire(wait)
    holder.start_renewing()
    atexit.register(holder.stop)
    _holders[_key(settings)] = holder
    return holder


def process_guard(settings: Settings) -> ShardGuard | None:
    """The guard a store of this process writes under. A process that serves nothing (an
    operator command, a library caller) joins its instance's grant or takes a free lease and
    never waits; losing it only stops its writes. With the coordination store unreachable
    (Redis down) it writes unguarded, as a local process beside the shard's workers may: they
    stop writing themselves once their lease goes unrenewed, and no standby can take over."""
    try:
        return hold_shard(settings, wait=False, on_lost=lambda: None).guard
    except KefuError:
        raise
    except Exception as error:
        log.warning(
            "shard %s: the lease cannot be asked for (%s); writing without it", settings.shard, type(error).__name__
        )
        return None


def release_shard() -> None:
    while _holders:
        _holders.popitem()[1].stop()
