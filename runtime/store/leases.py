"""Expiring named leases in the delivery store: one holder across processes and hosts.

A lease, unlike a process lock, frees itself when its holder dies: it simply expires. That is
also its danger: a holder that was only slow (a long model call, a paused VM) may still be
running when the lease passes to someone else. So every grant carries a fencing token that
increases with each new grant, and a holder's writes check, inside their own transaction, that
the lease is still theirs under that token (renewing it as they go). A holder that lost its
lease gets `LeaseLost` and writes nothing.

Leases are short and renewed by a heartbeat (`_Renewals`) while their holder works, so a
holder that died frees its work within one lease, whatever the work's length (a model call
may take minutes). Sooner still where it can be seen: a holder's name tells its process
(runtime.store.holders), and a holder found gone on this host is lapsed at once, by whoever asks for
its lease next and by `lapse_gone_holders` (a worker's start, the rescue beat).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from runtime.errors import KefuError
from runtime.store import DeliveryStore, holders, now_ms, queries
from runtime.store.connection import Connection
from runtime.store.holders import new_owner as new_owner  # every holder's name tells its process

log = logging.getLogger(__name__)


class LeaseLost(KefuError):
    def __init__(self, name: str) -> None:
        super().__init__(
            "KEFU_LEASE_LOST",
            f"lease {name} expired or passed to another holder; this holder stopped without writing",
            "nothing to do: the new holder continues; if it happens often, raise the lease's duration",
        )


class LeaseBusy(KefuError):
    def __init__(self, name: str) -> None:
        super().__init__(
            "KEFU_LEASE_BUSY",
            f"lease {name} is held by another holder; this one stopped at its first write",
            "nothing to do: the holder carries on",
        )


def _lapse_if_gone(conn: Connection, name: str, at: int) -> bool:
    """Inside a grant that found the lease held: lapse it when its holder's process is gone
    (runtime.store.holders), so the grant can go on at once instead of waiting out the lease."""
    owner = conn.execute(queries.lease.HOLDER, {"n": name, "now": at}).scalar_one_or_none()
    if owner is None or not holders.gone(owner):
        return False
    log.info("lease %s: its holder's process is gone; lapsed at once", name)
    return conn.execute(queries.lease.LAPSE, {"n": name, "o": owner, "now": at}).rowcount == 1


def lapse_gone_holders(store: DeliveryStore) -> list[str]:
    """Lapse every lease whose holder's process is gone on this host (a killed worker or pool
    process, seen from its restart or a sibling); returns their names. Holders elsewhere are
    left to expire."""
    at = now_ms()
    with store.read() as conn:
        found = [(str(name), str(owner)) for name, owner in conn.execute(queries.lease.UNEXPIRED, {"now": at})]
    gone = [(name, owner) for name, owner in found if holders.gone(owner)]
    if not gone:
        return []
    with store.write() as conn:
        lapsed = [
            name
            for name, owner in gone
            if conn.execute(queries.lease.LAPSE, {"n": name, "o": owner, "now": at}).rowcount
        ]
    if lapsed:
        log.warning("%d lease(s) of processes gone on this host lapsed at once", len(lapsed))
    return lapsed


@dataclass
class Fence:
    """Proof of one grant of a lease. `check` inside a write transaction fences that write.
    A fence of `claimed` starts ungranted (token 0): its first check takes the lease."""

    store: DeliveryStore
    name: str
    owner: str
    token: int
    ttl_ms: int
    released: bool = False  # let go inside the holder's last write (`check_and_release`)
    held_until: int = 0  # the expiry our last grant or renewal wrote (0: none, or lost)

    def _params(self, expires_in_ms: int | None) -> dict[str, object]:
        at = now_ms()
        expires_at = 0 if expires_in_ms is None else at + expires_in_ms
        return {"n": self.name, "o": self.owner, "t": self.token, "e": expires_at, "now": at}

    def check(self, conn: Connection) -> None:
        """Inside the caller's write transaction: the lease is still ours (and now renewed), or
        LeaseLost, which rolls the transaction back. The first check of an ungranted fence takes
        the lease instead, or raises LeaseBusy."""
        params = self._params(self.ttl_ms)
        if self.token == 0:
            token = conn.execute(queries.lease.GRANT, params).scalar_one_or_none()
            if token is None and _lapse_if_gone(conn, self.name, params["now"]):  # type: ignore[arg-type]
                token = conn.execute(queries.lease.GRANT, params).scalar_one_or_none()
            if token is None:
                raise LeaseBusy(self.name)
            self.token = token
        elif conn.execute(queries.lease.RENEW, params).rowcount != 1:
            self.held_until = 0
            raise LeaseLost(self.name)
        self.held_until = params["e"]  # type: ignore[assignment]

    def check_and_release(self, conn: Connection) -> None:
        """Inside the holder's last write: fenced like any write (one statement), and the lease
        is let go with it (a transaction fewer at the end of every turn). The holder's block
        releases it again only if that write did not commit."""
        if conn.execute(queries.lease.RELEASE_HELD, self._params(None)).rowcount != 1:
            raise LeaseLost(self.name)
        self.released, self.held_until = True, 0


@contextmanager
def fenced(store: DeliveryStore, fence: Fence | None, durable: bool = False) -> Iterator[Connection]:
    """A write transaction that holds only while the lease is ours (no fence: unfenced, for
    library use outside a worker). A renewal that did not commit is not counted as held."""
    if fence is None:
        with store.write(durable) as conn:
            yield conn
        return
    held_until = fence.held_until
    try:
        with store.write(durable) as conn:
            fence.check(conn)
            yield conn
    except BaseException:
        fence.held_until = min(fence.held_until, held_until)
        raise


@contextmanager
def before_file_write(fence: Fence) -> Iterator[None]:
    """Around a write to a file the lease guards (a session log): the lease must be ours with
    at least a third of its duration left (renewals keep three quarters). A file is outside the
    store's transactions, so this checks instead of holding the write lock through the write
    (which would stall every other writer for an fsync); another holder could only be granted
    the lease if this one stalled for a third of the lease between this check and its write.
    The lease needs no read: only its holder moves an unexpired lease's expiry, so the one our
    last grant or renewal wrote (a write of a transaction that committed, or the next write
    fails) is the stored one. Two others may lapse it, neither behind a live holder's back: a
    process that saw the holder's process gone (runtime.store.holders concludes that only on proof),
    and a new shard grant's claim of the store, whose fence is read here: another process may
    have claimed the store. No renewal here: the holder's renewer does it."""
    if fence.held_until < now_ms() + fence.ttl_ms // 3:
        raise LeaseLost(fence.name)
    if fence.store.guard is not None:  # the shard is still this process's to write
        with fence.store.raw() as db:
            fence.store.guard.confirm(db.execute)
    yield


def grant(store: DeliveryStore, name: str, owner: str, ttl_s: float) -> Fence | None:
    """Take the lease, or renew it when `owner` holds it. None while another holder has it."""
    fence = Fence(store, name, owner, 0, int(ttl_s * 1000))
    try:
        with store.write() as conn:
            fence.check(conn)
    except LeaseBusy:
        return None
    return fence


def acquire(store: DeliveryStore, name: str, owner: str, ttl_s: float) -> bool:
    return grant(store, name, owner, ttl_s) is not None


def release(store: DeliveryStore, name: str, owner: str) -> None:
    """Let the lease go at once. The row stays, so the next grant's token is still higher."""
    with store.write() as conn:
        conn.execute(queries.lease.RELEASE, {"n": name, "o": owner})


class _Renewals:
    """Renews every fence this process holds, each every quarter of its duration (a model call
    may take longer than the lease), from one thread that lives as long as the process: a
    thread per turn cost a start and a join, about a millisecond of every turn. A failed
    renewal is tried again within half a second; a lost lease is dropped (its holder's next
    write stops it)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._due: dict[int, tuple[Fence, float]] = {}  # id(fence) -> (fence, monotonic time due)
        self._pid = 0  # the process the thread runs in: a forked child starts its own

    def add(self, fence: Fence) -> None:
        with self._changed:
            if self._pid != os.getpid():
                self._pid, self._due = os.getpid(), {}
                threading.Thread(target=self._run, name="kefu-lease-renewals", daemon=True).start()
            self._due[id(fence)] = (fence, time.monotonic() + fence.ttl_ms / 4000)
            self._changed.notify()

    def remove(self, fence: Fence) -> None:
        with self._changed:
            self._due.pop(id(fence), None)

    def _run(self) -> None:
        while True:
            with self._changed:
                now = time.monotonic()
                due = [fence for fence, at in self._due.values() if at <= now]
                if not due:
                    self._changed.wait(min((at for _, at in self._due.values()), default=now + 60) - now)
                    continue
            for fence in due:
                self._reschedule(fence, self._renew(fence))

    def _renew(self, fence: Fence) -> float | None:
        """Renew one fence; seconds to the next renewal, or None once the lease is lost. A fence
        its holder's own writes renewed within the last quarter (each fenced write renews it)
        needs no write of its own yet: most turns write between their model calls."""
        interval_s = fence.ttl_ms / 4000
        if fence.token == 0:  # not taken yet (`claimed`): its first write takes it
            return interval_s
        renewed_s_ago = (now_ms() - (fence.held_until - fence.ttl_ms)) / 1000
        if fence.held_until and renewed_s_ago < interval_s:
            return interval_s - renewed_s_ago
        try:
            with fenced(fence.store, fence):
                pass
            return interval_s
        except LeaseLost:
            if not fence.released:  # (its holder let it go in its last write: no news)
                log.warning("lease %s lost while held; its holder's next write stops it", fence.name)
            return None
        except Exception as error:  # a busy store: try again soon, well before the lease runs low
            log.warning("renewing lease %s failed (%s)", fence.name, type(error).__name__)
            return min(interval_s, 0.5)

    def _reschedule(self, fence: Fence, in_s: float | None) -> None:
        with self._changed:
            entry = self._due.get(id(fence))
            if entry is None or entry[0] is not fence:
                return  # its holder let go meanwhile
            if in_s is None:
                del self._due[id(fence)]
            else:
                self._due[id(fence)] = (fence, time.monotonic() + in_s)


_renewals = _Renewals()


@contextmanager
def held(store: DeliveryStore, name: str, ttl_s: float) -> Iterator[Fence | None]:
    """The lease for the duration of the block, kept renewed; None when another holder has it.
    Released at the end unless it was lost meanwhile (then it is not ours to release)."""
    owner = new_owner()
    fence = grant(store, name, owner, ttl_s)
    if fence is None:
        yield None
        return
    with _holding(fence):
        yield fence


@contextmanager
def claimed(store: DeliveryStore, name: str, ttl_s: float) -> Iterator[Fence]:
    """Like `held`, but the lease is taken by the block's first fenced write, in that write's
    own transaction (a transaction fewer); that write raises LeaseBusy while another holder has
    it, before anything was written."""
    with _holding(Fence(store, name, new_owner(), 0, int(ttl_s * 1000))) as fence:
        yield fence


@contextmanager
def _holding(fence: Fence) -> Iterator[Fence]:
    """Renewed while the block runs, released at its end unless its last write let it go."""
    _renewals.add(fence)
    try:
        yield fence
    except BaseException:
        fence.released = False  # the write that let it go may not have committed
        raise
    finally:
        _renewals.remove(fence)
        if fence.token and not fence.released:
            release(fence.store, fence.name, fence.owner)
