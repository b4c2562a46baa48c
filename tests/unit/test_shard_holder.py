"""Holding a shard's lease (SPEC 3.12): an instance's processes join one grant, another
instance refuses or waits and takes over, and a holder that can no longer renew stops writing
before its lease could have expired."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from config import Settings, load_settings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.placement.shards import ShardGuard, ShardHeldElsewhere, ShardLeaseLost
from runtime.store import DeliveryStore
from worker.coordination import Grant, LocalCoordinator
from worker.shard_lease import ShardHolder

LEASE_S = 2.0  # the shortest lease the settings allow
TTL_NS = int(LEASE_S * 1_000_000_000)


def eventually(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.01)


class Partition:
    """A coordinator whose `grant` starts failing after `good` successful calls: this
    process is cut off from Redis. Everything else (what the test looks at) still answers."""

    def __init__(self, inner: LocalCoordinator, good: int) -> None:
        self.inner = inner
        self.good = good
        self.calls = 0
        self.last_good_ns = 0  # when the last successful grant was asked for (monotonic)
        self.failures = 0

    def grant(self, shard: str, owner: str, ttl_ms: int, member: str = "", floor: int = 0) -> Grant | None:
        if self.calls >= self.good:
            self.failures += 1
            raise ConnectionError("the coordinator is unreachable")
        asked = time.monotonic_ns()
        grant = self.inner.grant(shard, owner, ttl_ms, member, floor)
        self.last_good_ns = asked  # the lease lives at least ttl after this
        self.calls += 1
        return grant

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Lost:
    def __init__(self) -> None:
        self.calls = 0
        self.event = threading.Event()

    def __call__(self) -> None:
        self.calls += 1
        self.event.set()


@pytest.fixture
def coordinator(tmp_path: Path) -> LocalCoordinator:
    return LocalCoordinator(tmp_path / "coordination.sqlite")


def settings_of(tmp_path: Path, instance: str) -> Settings:
    return load_settings(data_dir=tmp_path / "var", shard="east", instance=instance, shard_lease_s=LEASE_S)


@pytest.fixture
def make_holder(tmp_path: Path, coordinator: LocalCoordinator) -> Iterator[Callable[..., ShardHolder]]:
    made: list[ShardHolder] = []

    def make(instance: str, on_lost: Callable[[], None] | None = None, via: Any = None) -> ShardHolder:
        holder = ShardHolder(settings_of(tmp_path, instance), via or coordinator, on_lost or Lost())
        made.append(holder)
        return holder

    yield make
    for holder in made:
        holder.stop()


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[[ShardGuard], DeliveryStore]]:
    """The shard's delivery store, as a process writing under `guard` opens it."""
    opened: list[DeliveryStore] = []
    settings = settings_of(tmp_path, "any")

    def open_(guard: ShardGuard) -> DeliveryStore:
        store = DeliveryStore(settings.delivery_path, settings.delivery, guard=guard)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


def write(store: DeliveryStore, name: str) -> None:
    create_account(store, AccountSpec(id=name, platform="simulator", identity=f"seller-{name}"))


def test_the_processes_of_one_instance_join_one_grant(make_holder, coordinator):
    first, second = make_holder("a"), make_holder("a")
    first.acquire(wait=False)
    second.acquire(wait=False)
    assert first.guard.require() == second.guard.require()  # the same fencing token
    token = first.guard.token

    first.stop()  # the one that took it stops: the lease stays while another of the instance holds it
    holder = coordinator.holder("east")
    assert holder is not None and (holder.owner, holder.token) == ("a", token)
    assert second.guard.require() == token
    with pytest.raises(ShardHeldElsewhere):
        make_holder("b").acquire(wait=False)
    second.stop()  # the last of the instance: now it goes
    assert coordinator.holder("east") is None

    first.stop()  # it took the lease: it lets it go
    assert coordinator.holder("east") is None
    with pytest.raises(ShardLeaseLost):
        first.guard.require()


def test_another_instance_without_wait_is_refused(make_holder, coordinator):
    first = make_holder("a")
    first.acquire(wait=False)
    other = make_holder("b")
    with pytest.raises(ShardHeldElsewhere) as refused:
        other.acquire(wait=False)
    assert refused.value.code == "KEFU_SHARD_HELD_ELSEWHERE"
    assert "'a'" in str(refused.value)  # it names the instance serving the shard
    with pytest.raises(ShardLeaseLost):
        other.guard.require()
    assert coordinator.standbys("east") == []  # it did not wait
    assert coordinator.holder("east").owner == "a"


def test_acquire_without_wait_raises_when_the_coordinator_cannot_be_asked(make_holder, coordinator):
    holder = make_holder("a", via=Partition(coordinator, good=0))
    with pytest.raises(ConnectionError):
        holder.acquire(wait=False)
    with pytest.raises(ShardLeaseLost):
        holder.guard.require()


def test_a_standby_takes_over_when_the_holder_stops(make_holder, coordinator, open_store):
    first = make_holder("a")
    first.acquire(wait=False)
    first.start_renewing()
    old_store = open_store(first.guard)
    write(old_store, "by-a")
    standby = make_holder("b")
    failed: list[BaseException] = []

    def wait_for_it() -> None:
        try:
            standby.acquire(wait=True)
        except BaseException as error:  # reported by the test
            failed.append(error)

    thread = threading.Thread(target=wait_for_it, daemon=True)
    thread.start()
    eventually(lambda: coordinator.standbys("east") == ["b"])
    assert thread.is_alive()
    with pytest.raises(ShardLeaseLost):  # a standby cannot write
        standby.guard.require()

    first.stop()
    thread.join(10)
    assert not thread.is_alive() and failed == []
    assert standby.guard.require() > first.guard.token
    holder = coordinator.holder("east")
    assert holder is not None and (holder.owner, holder.token) == ("b", standby.guard.token)
    with pytest.raises(ShardLeaseLost):
        write(old_store, "late-a")
    new_store = open_store(standby.guard)
    write(new_store, "by-b")
    with new_store.read() as conn:
        grants = conn.execute("SELECT token, owner FROM shard_grant ORDER BY token").all()
        accounts = conn.execute("SELECT id FROM account ORDER BY id").scalars().all()
    assert [tuple(g) for g in grants] == [(first.guard.token, "a"), (standby.guard.token, "b")]
    assert accounts == ["by-a", "by-b"]


def test_a_partitioned_holder_stops_writing_before_its_lease_could_expire(make_holder, coordinator, open_store):
    partition = Partition(coordinator, good=5)  # the grant and four renewals, then cut off
    lost = Lost()
    holder = make_holder("a", on_lost=lost, via=partition)
    acquired = time.monotonic_ns()
    holder.acquire(wait=False)
    token = holder.guard.token
    holder.start_renewing()
    store = open_store(holder.guard)
    eventually(lambda: partition.calls >= 5)
    assert time.monotonic_ns() > acquired + TTL_NS * 0.8  # past the first grant's local deadline:
    write(store, "while-renewed")  # renewals kept it
    assert holder.guard.require() == token

    eventually(lambda: partition.failures >= 1)
    while True:  # until the guard refuses
        try:
            holder.guard.require()
        except ShardLeaseLost:
            refused_at = time.monotonic_ns()
            break
        assert time.monotonic_ns() < partition.last_good_ns + TTL_NS, "still writing when the lease could expire"
        time.sleep(0.005)
    assert refused_at < partition.last_good_ns + TTL_NS
    # Redis (here: the file) still has the lease ours: nobody else can have started writing.
    still = coordinator.holder("east")
    assert still is not None and (still.owner, still.token) == ("a", token)
    assert coordinator.grant("east", "b", 1000) is None
    with pytest.raises(ShardLeaseLost):
        write(store, "after-the-cut")
    with store.read() as conn:
        assert conn.execute("SELECT id FROM account").scalars().all() == ["while-renewed"]

    assert lost.event.wait(10)
    assert lost.calls == 1 and holder.guard.lost


def test_a_renewal_refused_because_another_owner_took_the_lease_loses_it(make_holder, coordinator, open_store):
    lost = Lost()
    holder = make_holder("a", on_lost=lost)
    holder.acquire(wait=False)
    holder.start_renewing()
    store = open_store(holder.guard)
    write(store, "by-a")
    coordinator.release("east", "a", holder.member)  # as if a's lease had lapsed (a paused process)...
    taken = coordinator.grant("east", "b", 60_000)  # ...and another instance took it
    assert taken is not None and taken.token > holder.guard.token

    assert lost.event.wait(10)  # a's next renewal is refused
    assert lost.calls == 1 and holder.guard.lost
    with pytest.raises(ShardLeaseLost):
        write(store, "late-a")
    holder.stop()  # not a's lease any more: stopping leaves b's alone
    still = coordinator.holder("east")
    assert still is not None and (still.owner, still.token) == ("b", taken.token)


def test_a_write_that_finds_a_newer_grant_in_the_store_loses_the_lease(make_holder, coordinator, open_store):
    lost = Lost()
    holder = make_holder("a", on_lost=lost)
    holder.acquire(wait=False)
    holder.start_renewing()
    store = open_store(holder.guard)
    write(store, "by-a")
    newer = ShardGuard("east", "b")  # the store saw a newer grant; the coordinator still renews a's
    newer.hold(holder.guard.token + 1, time.monotonic_ns() + 60 * 1_000_000_000)
    write(open_store(newer), "by-b")

    with pytest.raises(ShardLeaseLost):
        write(store, "late-a")
    assert holder.guard.lost
    assert lost.event.wait(10)  # the renewer sees it at its next round: the process stops
    assert lost.calls == 1


class Stall:
    """Holds the holder's renewal requests up until resumed (a hung request, a paused VM)."""

    def __init__(self, inner: LocalCoordinator) -> None:
        self.inner, self.stall, self.resume = inner, threading.Event(), threading.Event()

    def grant(self, shard: str, owner: str, ttl_ms: int, member: str = "", floor: int = 0) -> Grant | None:
        if self.stall.is_set():
            self.resume.wait(30)
        return self.inner.grant(shard, owner, ttl_ms, member, floor)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_renewal_that_stalled_past_the_lease_loses_it_even_if_the_lease_was_free_again(tmp_path, open_store):
    coordinator = LocalCoordinator(tmp_path / "coordination.sqlite")
    stall, lost = Stall(coordinator), Lost()
    a = ShardHolder(settings_of(tmp_path, "a"), stall, lost)
    a.acquire(wait=False)
    a.start_renewing()
    store_a = open_store(a.guard)
    write(store_a, "by-a")
    stall.stall.set()
    eventually(lambda: coordinator.holder("east") is None)  # a's lease lapsed meanwhile
    b = ShardHolder(settings_of(tmp_path, "b"), coordinator, Lost())  # another instance served it…
    b.acquire(wait=False)
    write(open_store(b.guard), "by-b")
    b.stop()  # …and let go again
    stall.stall.clear()
    stall.resume.set()  # a's stalled renewal goes through: the lease is free, a new grant
    assert lost.event.wait(10)
    assert lost.calls == 1 and a.guard.lost
    with pytest.raises(ShardLeaseLost):
        write(store_a, "by-a-after-b")
    a.stop()


def test_after_the_coordinator_lost_its_memory_a_holder_takes_a_grant_above_the_stores_fence(tmp_path, open_store):
    before = LocalCoordinator(tmp_path / "before.sqlite")
    first = ShardHolder(settings_of(tmp_path, "a"), before, Lost())
    first.acquire(wait=False)
    write(open_store(first.guard), "by-first")
    first.stop()
    second = ShardHolder(settings_of(tmp_path, "a"), before, Lost())  # a host restarted: grant 2
    second.acquire(wait=False)
    write(open_store(second.guard), "by-second")
    second.stop()
    assert second.guard.token == 2

    wiped = LocalCoordinator(tmp_path / "wiped.sqlite")  # the counter starts again at 1
    lost = Lost()
    stale = ShardHolder(settings_of(tmp_path, "a"), wiped, lost)
    stale.guard.hold(1, time.monotonic_ns() + TTL_NS)  # a grant taken without the floor
    wiped.grant("east", "a", int(LEASE_S * 1000), stale.member)
    stale.start_renewing()
    with pytest.raises(ShardLeaseLost):  # the store refuses grant 1…
        write(open_store(stale.guard), "by-stale")
    assert lost.event.wait(10)

    again = ShardHolder(settings_of(tmp_path, "a"), wiped, Lost())  # …and after one restart:
    again.acquire(wait=False)
    assert again.guard.token == 3
    write(open_store(again.guard), "by-again")
    again.stop()
