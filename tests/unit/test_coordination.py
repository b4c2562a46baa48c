"""The coordination contract (SPEC 3.12), run against both coordinators: the SQLite file of
one machine and Redis. Shard leases with fencing tokens, standbys, the account directory's
compare-and-set, the move journal and its blobs."""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from runtime.errors import KefuError
from runtime.placement.shards import Placement
from runtime.store.states import PlacementState
from tests.integration import conftest as integration
from worker.coordination import Coordinator, Grant, LocalCoordinator, RedisCoordinator

SHORT_MS = 300
LONG_MS = 60_000

redis_base_url = integration.redis_base_url  # the suite's test Redis: KEFU_TEST_REDIS_URL, else a local one


@pytest.fixture
def n() -> Callable[[str], str]:
    """Names of this test's shards, accounts and journal keys: unique, so tests sharing the
    Redis test database (other runs, other suites) never see each other's."""
    prefix = f"t{uuid.uuid4().hex[:10]}-"
    return lambda name: prefix + name


@pytest.fixture(params=["local", "redis"])
def coordinator(request: pytest.FixtureRequest, tmp_path: Path, n: Callable[[str], str]) -> Iterator[Coordinator]:
    if request.param == "local":
        yield LocalCoordinator(tmp_path / "coordination.sqlite")
        return
    url = f"{request.getfixturevalue('redis_base_url')}/{integration.REDIS_SECOND_DB}"
    yield RedisCoordinator(url)
    client = redis.Redis.from_url(url)  # leave the database as it was: drop only this test's keys
    prefix = n("").encode()
    for key in client.scan_iter(match=b"*" + prefix + b"*"):
        client.delete(key)
    if shards := [name for name in client.smembers("kefu:shards") if name.startswith(prefix)]:
        client.srem("kefu:shards", *shards)
    if entries := [account for account in client.hkeys("kefu:directory") if account.startswith(prefix)]:
        client.hdel("kefu:directory", *entries)
    client.close()


def eventually(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.02)


# --- shard leases ---------------------------------------------------------------------------


def test_the_first_grant_is_new_and_a_renewal_keeps_its_token(coordinator, n):
    s = n("s")
    first = coordinator.grant(s, "a", SHORT_MS)
    assert first is not None and first.new and first.token >= 1
    started = time.monotonic()
    while time.monotonic() - started < 3 * SHORT_MS / 1000:  # renewed past its first expiry
        renewal = coordinator.grant(s, "a", SHORT_MS)
        assert renewal is not None and renewal.token == first.token and not renewal.new
        assert coordinator.grant(s, "b", SHORT_MS) is None
        time.sleep(SHORT_MS / 6000)
    holder = coordinator.holder(s)
    assert holder is not None and (holder.owner, holder.token) == ("a", first.token)
    assert 0 < holder.expires_in_ms <= SHORT_MS


def test_another_owner_gets_nothing_while_the_lease_is_held(coordinator, n):
    s = n("s")
    first = coordinator.grant(s, "a", LONG_MS)
    assert coordinator.grant(s, "b", LONG_MS) is None
    assert coordinator.grant(s, "b", LONG_MS) is None
    holder = coordinator.holder(s)
    assert holder is not None and (holder.owner, holder.token) == ("a", first.token)
    assert coordinator.grant(s, "a", LONG_MS).token == first.token  # b's attempts changed nothing


def test_a_grant_after_expiry_has_a_strictly_higher_token(coordinator, n):
    s = n("s")
    first = coordinator.grant(s, "a", SHORT_MS)
    eventually(lambda: coordinator.holder(s) is None)
    second = coordinator.grant(s, "b", LONG_MS)
    assert second is not None and second.new and second.token > first.token
    holder = coordinator.holder(s)
    assert holder is not None and (holder.owner, holder.token) == ("b", second.token)
    assert coordinator.grant(s, "a", LONG_MS) is None  # a's renewal comes too late


def test_the_same_owner_after_its_own_lease_lapsed_gets_a_new_grant(coordinator, n):
    s = n("s")
    first = coordinator.grant(s, "a", SHORT_MS)
    eventually(lambda: coordinator.holder(s) is None)
    again = coordinator.grant(s, "a", LONG_MS)
    assert again is not None and again.new and again.token > first.token


def test_release_frees_the_lease_and_the_next_grant_has_a_higher_token(coordinator, n):
    s = n("s")
    first = coordinator.grant(s, "a", LONG_MS)
    coordinator.release(s, "a")
    assert coordinator.holder(s) is None
    second = coordinator.grant(s, "b", LONG_MS)
    assert second is not None and second.new and second.token > first.token
    coordinator.release(s, "b")
    third = coordinator.grant(s, "a", LONG_MS)
    assert third is not None and third.token > second.token


def test_release_by_another_owner_does_nothing(coordinator, n):
    s = n("s")
    first = coordinator.grant(s, "a", LONG_MS)
    coordinator.release(s, "b")
    holder = coordinator.holder(s)
    assert holder is not None and (holder.owner, holder.token) == ("a", first.token)
    assert coordinator.grant(s, "b", LONG_MS) is None
    renewal = coordinator.grant(s, "a", LONG_MS)
    assert renewal.token == first.token and not renewal.new


def test_each_shard_has_its_own_lease(coordinator, n):
    s, t = n("s"), n("t")
    assert s not in coordinator.shards() and t not in coordinator.shards()
    assert coordinator.holder(s) is None
    a = coordinator.grant(s, "a", LONG_MS)
    b = coordinator.grant(t, "b", LONG_MS)  # another shard: free, whoever holds "s"
    assert a is not None and b is not None
    assert coordinator.holder(s).owner == "a" and coordinator.holder(t).owner == "b"
    coordinator.release(t, "b")
    assert coordinator.holder(s).owner == "a"
    listed = coordinator.shards()
    assert [name for name in listed if name in (s, t)] == [s, t]  # every shard ever granted, by name
    assert listed == sorted(listed)


def test_concurrent_grants_give_the_lease_to_exactly_one_owner(coordinator, n):
    s = n("s")
    owners = [f"o{i}" for i in range(8)]
    results: dict[str, object] = {}
    start = threading.Barrier(len(owners))

    def ask(owner: str) -> None:
        start.wait()
        results[owner] = coordinator.grant(s, owner, LONG_MS)

    threads = [threading.Thread(target=ask, args=(owner,)) for owner in owners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    winners = [owner for owner, grant in results.items() if grant is not None]
    assert len(results) == len(owners) and len(winners) == 1
    assert coordinator.holder(s).owner == winners[0]


# --- standbys -------------------------------------------------------------------------------


def test_standbys_are_listed_until_their_announcement_expires(coordinator, n):
    s, t = n("s"), n("t")
    assert coordinator.standbys(s) == []
    coordinator.announce_standby(s, "c", LONG_MS)
    coordinator.announce_standby(s, "b", SHORT_MS)
    coordinator.announce_standby(t, "d", LONG_MS)
    assert coordinator.standbys(s) == ["b", "c"]
    assert coordinator.standbys(t) == ["d"]
    eventually(lambda: coordinator.standbys(s) == ["c"])
    coordinator.announce_standby(s, "b", LONG_MS)  # announced again: back
    assert coordinator.standbys(s) == ["b", "c"]


# --- the directory --------------------------------------------------------------------------


def test_place_is_a_compare_and_set(coordinator, n):
    shop, another = n("shop"), n("another")
    first = Placement(account_id=shop, shard="east")
    assert coordinator.placement(shop) is None
    assert coordinator.place(first, expected=None)  # absent: set
    assert coordinator.placement(shop) == first
    moving = first.model_copy(update={"state": PlacementState.MOVING})
    assert not coordinator.place(moving, expected=None)  # it is not absent any more
    wrong = first.model_copy(update={"generation": 7})
    assert not coordinator.place(moving, expected=wrong)
    assert not coordinator.place(moving, expected=Placement(account_id=shop, shard="west"))
    assert coordinator.placement(shop) == first  # refused: unchanged
    assert coordinator.place(moving, expected=first)
    arrived = Placement(account_id=shop, shard="west", generation=2)
    assert not coordinator.place(arrived, expected=first)  # the entry it expects is gone
    assert coordinator.place(arrived, expected=moving)
    assert coordinator.placement(shop) == arrived
    other = Placement(account_id=another, shard="east")
    assert coordinator.place(other, expected=None)
    assert [p for p in coordinator.placements() if p.account_id in (shop, another)] == [other, arrived]  # by id


def test_only_one_of_concurrent_compare_and_sets_wins(coordinator, n):
    shop = n("shop")
    base = Placement(account_id=shop, shard="east")
    assert coordinator.place(base, expected=None)
    results: list[bool] = []
    start = threading.Barrier(8)

    def move(index: int) -> None:
        start.wait()
        results.append(coordinator.place(Placement(account_id=shop, shard=f"s{index}", generation=2), base))

    threads = [threading.Thread(target=move, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(results) == [False] * 7 + [True]
    assert coordinator.placement(shop).generation == 2


# --- journal and blobs ----------------------------------------------------------------------


def test_journal_round_trip(coordinator, n):
    op = n("op-1")
    assert coordinator.journal(op) is None
    record = {"op_id": "op-1", "step": "exported", "files": ["a", "b"], "note": "迁移", "n": 3, "done": None}
    coordinator.save_journal(op, record)
    assert coordinator.journal(op) == record
    coordinator.save_journal(op, {**record, "step": "imported"})
    assert coordinator.journal(op)["step"] == "imported"
    assert coordinator.journal(n("op-2")) is None


def test_journal_swap_replaces_only_the_version_read_and_keeps_the_open_index(coordinator, n):
    op = n("op-1")
    record = {"op_id": op, "step": "stopping", "version": 0}
    assert coordinator.swap_journal(op, record, None, is_open=True)
    assert not coordinator.swap_journal(op, record, None, is_open=True)  # one creator
    assert op in coordinator.open_moves()
    assert coordinator.swap_journal(op, {**record, "step": "exported", "version": 1}, 0, is_open=True)
    assert not coordinator.swap_journal(op, {**record, "step": "rolling-back-source", "version": 1}, 0, is_open=True)
    assert coordinator.journal(op)["step"] == "exported"
    assert coordinator.swap_journal(op, {**record, "step": "rolled-back", "version": 2}, 1, is_open=False)
    assert op not in coordinator.open_moves()


def test_blob_round_trip_and_drop(coordinator, n):
    slice_ = n("op-1:slice")
    assert coordinator.blob(slice_) is None
    data = bytes(range(256)) * 64
    coordinator.put_blob(slice_, data)
    assert coordinator.blob(slice_) == data
    coordinator.put_blob(slice_, b"replaced")
    assert coordinator.blob(slice_) == b"replaced"
    coordinator.drop_blob(slice_)
    assert coordinator.blob(slice_) is None
    coordinator.drop_blob(slice_)  # dropping what is gone is fine


def test_a_blob_with_a_ttl_expires_and_one_without_stays(coordinator, n):
    slice_, credential = n("op-1:slice"), n("op-1:credential")
    coordinator.put_blob(credential, b"secret", ttl_s=1)
    coordinator.put_blob(slice_, b"slice")
    assert coordinator.blob(credential) == b"secret"
    eventually(lambda: coordinator.blob(credential) is None)
    assert coordinator.blob(slice_) == b"slice"


# --- the local file -------------------------------------------------------------------------


def test_local_coordinators_on_one_file_share_everything(tmp_path):
    one = LocalCoordinator(tmp_path / "coordination.sqlite")
    two = LocalCoordinator(tmp_path / "coordination.sqlite")  # another process of the machine
    grant = one.grant("s", "a", LONG_MS)
    assert two.grant("s", "b", LONG_MS) is None
    assert two.holder("s").token == grant.token
    one.release("s", "a")
    assert two.grant("s", "b", LONG_MS).token > grant.token
    assert two.place(Placement(account_id="shop", shard="east"), expected=None)
    assert not one.place(Placement(account_id="shop", shard="west"), expected=None)


def test_a_release_keeps_the_lease_while_another_member_of_the_owner_renews_it(coordinator, n):
    s = n("s")
    first = coordinator.grant(s, "a", LONG_MS, "worker")
    assert coordinator.grant(s, "a", LONG_MS, "listener") == Grant(first.token, new=False)
    coordinator.release(s, "a", "worker")  # the worker restarts; the listener of the same host goes on
    holder = coordinator.holder(s)
    assert holder is not None and (holder.owner, holder.token) == ("a", first.token)
    assert coordinator.grant(s, "b", LONG_MS) is None
    coordinator.release(s, "a", "listener")
    assert coordinator.holder(s) is None


# --- a coordinator that lost its memory (Redis without persistence, an empty replica) ------


def forget(coordinator: Coordinator, shard: str) -> None:
    """The coordinator loses the shard's lease and grant counter, as a Redis restarted empty does."""
    if isinstance(coordinator, RedisCoordinator):
        client = coordinator._redis
        client.delete(*(f"kefu:shard:{shard}:{what}" for what in ("lease", "tokens", "members", "standby")))
        return
    with coordinator._db() as db:
        for table in ("lease", "token", "member", "standby"):
            db.execute(f"DELETE FROM {table} WHERE shard = ?", (shard,))


def test_a_new_grant_is_above_the_floor_even_after_the_counter_was_lost(coordinator, n):
    s = n("s")
    first = coordinator.grant(s, "a", LONG_MS)
    assert first is not None and first.token == 1
    coordinator.grant(s, "a", LONG_MS, "other")
    coordinator.release(s, "a")
    coordinator.release(s, "a", "other")
    second = coordinator.grant(s, "b", LONG_MS)
    assert second is not None and second.token == 2
    forget(coordinator, s)  # the store's fence has seen grant 2; the counter starts again
    third = coordinator.grant(s, "b", LONG_MS, floor=2)
    assert third == Grant(3, new=True)
    assert coordinator.grant(s, "b", LONG_MS, floor=3) == Grant(3, new=False)  # a renewal at its own token
    coordinator.release(s, "b")
    assert coordinator.grant(s, "a", LONG_MS, floor=0) == Grant(4, new=True)  # a lower floor never lowers it


def test_an_owners_grant_below_the_floor_is_issued_again(coordinator, n):
    s = n("s")
    forget(coordinator, s)
    stale = coordinator.grant(s, "a", LONG_MS, "listener")  # taken after the loss, with no floor
    assert stale == Grant(1, new=True)
    joined = coordinator.grant(s, "a", LONG_MS, "worker", floor=5)  # the store has seen grant 5
    assert joined == Grant(6, new=True)
    renewal = coordinator.grant(s, "a", LONG_MS, "listener", floor=stale.token)
    assert renewal == Grant(6, new=False)  # the listener's renewal sees another token: it lets go
    assert coordinator.grant(s, "b", LONG_MS, floor=9) is None  # another owner still waits
    holder = coordinator.holder(s)
    assert holder is not None and (holder.owner, holder.token) == ("a", 6)


# --- the one machine's file: its schema (runtime.store.migrate) -----------------------------


def test_a_coordination_file_made_before_versions_opens_with_what_it_held(tmp_path: Path) -> None:
    """Such a file (user_version 0) had its tables made at every open, the index of open moves
    last: it keeps its leases and journal and only takes the version stamp."""
    path = tmp_path / "coordination.sqlite"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE lease (shard TEXT PRIMARY KEY, owner TEXT NOT NULL, token INTEGER NOT NULL,"
        " expires_at INTEGER NOT NULL);"
        "CREATE TABLE token (shard TEXT PRIMARY KEY, last INTEGER NOT NULL);"
        "CREATE TABLE standby (shard TEXT NOT NULL, owner TEXT NOT NULL, expires_at INTEGER NOT NULL,"
        " PRIMARY KEY (shard, owner));"
        "CREATE TABLE member (shard TEXT NOT NULL, owner TEXT NOT NULL, member TEXT NOT NULL,"
        " expires_at INTEGER NOT NULL, PRIMARY KEY (shard, owner, member));"
        "CREATE TABLE directory (account_id TEXT PRIMARY KEY, entry TEXT NOT NULL);"
        "CREATE TABLE journal (op_id TEXT PRIMARY KEY, record TEXT NOT NULL);"
        "CREATE TABLE blob (key TEXT PRIMARY KEY, data BLOB NOT NULL, expires_at INTEGER);"
        "INSERT INTO token VALUES ('s', 4);"
        "INSERT INTO journal VALUES ('op-1', '{\"version\": 1}');"
    )
    db.close()
    coordinator = LocalCoordinator(path)
    assert coordinator.shards() == ["s"] and coordinator.journal("op-1") == {"version": 1}
    assert coordinator.grant("s", "a", LONG_MS) == Grant(5, new=True)
    assert coordinator.swap_journal("op-1", {"version": 2}, 1, is_open=True) and coordinator.open_moves() == ["op-1"]
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (1,)
    db.execute("PRAGMA user_version = 2")  # as a newer kefu would leave it
    db.close()
    with pytest.raises(KefuError) as refused:
        LocalCoordinator(path)
    assert refused.value.code == "KEFU_SCHEMA_TOO_NEW" and str(path) in str(refused.value)
