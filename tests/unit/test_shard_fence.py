"""The shard fence (SPEC 3.12): a guarded delivery store takes writes only under the newest
grant of its shard's lease it has seen, and only while the grant is ours by the local clock;
customer ids of a shard start at its own base."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
from sqlalchemy.exc import IntegrityError

from config import Settings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.batches import evaluate
from runtime.admission.handling import pause_handling
from runtime.admission.routes import RouteSpec, create_route
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.session_log import SessionLog
from runtime.agent.turn import run_turn
from runtime.inbound.inbox import record_received
from runtime.inbound.ingest import ingest_page
from runtime.inbound.pages import InboundPage, parse_page
from runtime.placement.shards import ID_RANGE, ShardGuard, ShardLeaseLost, customer_id_base
from runtime.store import DeliveryStore, immediate, leases
from runtime.store.leases import before_file_write
from runtime.store.migrate import ORDINARY_TABLES
from runtime.store.migrations import LATEST_VERSION

MINUTE_NS = 60 * 1_000_000_000
AT = "2026-11-30T06:05:00+00:00"


def held(token: int, owner: str = "a", shard: str = "default", deadline_ns: int | None = None) -> ShardGuard:
    guard = ShardGuard(shard, owner)
    guard.hold(token, time.monotonic_ns() + MINUTE_NS if deadline_ns is None else deadline_ns)
    return guard


@pytest.fixture
def open_store(settings: Settings) -> Iterator[Callable[..., DeliveryStore]]:
    """Stores on the one delivery file of `settings`, as different processes would open it."""
    opened: list[DeliveryStore] = []

    def open_(guard: ShardGuard | None = None, base: int = 0) -> DeliveryStore:
        store = DeliveryStore(settings.delivery_path, settings.delivery, guard=guard, customer_id_base=base)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


def snapshot(store: DeliveryStore) -> dict[str, list[tuple]]:
    """Every row of every table: what "the store is unchanged" compares."""
    with store.read() as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        return {table: [tuple(row) for row in conn.execute(f'SELECT * FROM "{table}"')] for table in tables}


def fence_rows(store: DeliveryStore) -> tuple[list[tuple], list[tuple]]:
    with store.read() as conn:
        fence = [tuple(r) for r in conn.execute("SELECT id, token, owner FROM shard_fence")]
        grants = [tuple(r) for r in conn.execute("SELECT token, owner FROM shard_grant ORDER BY token")]
    return fence, grants


def add_account(store: DeliveryStore, account: str = "shop") -> None:
    create_account(store, AccountSpec(id=account, platform="simulator", identity=f"seller-{account}"))


def identity(store: DeliveryStore, account: str = "shop") -> str:
    with store.read() as conn:
        return conn.execute("SELECT identity FROM account WHERE id = ?", (account,)).scalar_one()


def page(op: str = "p1", conversations: tuple[str, ...] = ("conv-1",), account: str = "shop") -> InboundPage:
    return parse_page(
        {
            "account_id": account,
            "stream_id": "s",
            "cursor": f"cursor-{op}",
            "page_op_id": op,
            "groups": [
                {
                    "conversation_id": conversation,
                    "conversation_type": "direct",
                    "messages": [
                        {
                            "platform_message_id": f"{op}-{conversation}",
                            "sender": {"id": f"buyer-{conversation}", "display_name": "张三", "role": "buyer"},
                            "content": {"type": "text", "text": "你好"},
                            "occurred_at": AT,
                            "direct_peer_id": f"buyer-{conversation}",
                        }
                    ],
                }
                for conversation in conversations
            ],
        }
    )


def customer_ids(store: DeliveryStore) -> dict[str, int]:
    with store.read() as conn:
        return dict(conn.execute("SELECT conversation_id, id FROM customer").all())


# --- the fence ------------------------------------------------------------------------------


def test_writes_pass_under_the_current_token_and_the_first_one_claims_the_store(open_store):
    store = open_store(held(1, owner="a"))
    assert fence_rows(store) == ([], [])  # opening (migrating) the store claims nothing
    add_account(store)
    with store.write() as conn:
        conn.execute("UPDATE account SET identity = 'renamed' WHERE id = 'shop'")
    assert identity(store) == "renamed"
    assert fence_rows(store) == ([(1, 1, "a")], [(1, "a")])  # one grant, recorded once


def test_a_newer_grant_claims_the_store_and_the_older_one_then_writes_nothing(open_store):
    old_guard, new_guard = held(1, owner="a"), held(2, owner="b")
    old = open_store(old_guard)
    add_account(old)
    new = open_store(new_guard)
    with new.write() as conn:  # the new holder's first write claims the store
        conn.execute("UPDATE account SET identity = 'by-b' WHERE id = 'shop'")
    assert fence_rows(new) == ([(1, 2, "b")], [(1, "a"), (2, "b")])
    before = snapshot(new)

    with pytest.raises(ShardLeaseLost) as lost:
        with old.write() as conn:
            conn.execute("UPDATE account SET identity = 'by-a' WHERE id = 'shop'")
    assert lost.value.code == "KEFU_SHARD_LEASE_LOST"
    assert old_guard.lost  # the whole process (and its children) now knows
    with pytest.raises(ShardLeaseLost):
        add_account(old, "another")
    assert snapshot(new) == before
    assert identity(old) == "by-b"  # reads still work for the stale holder

    with new.write() as conn:  # the refused writes left no lock behind
        conn.execute("UPDATE account SET identity = 'by-b-again' WHERE id = 'shop'")
    assert identity(new) == "by-b-again"


def assert_refused(
    write: Callable[[DeliveryStore], None], stale: DeliveryStore, guard: ShardGuard, new: DeliveryStore, before: dict
) -> None:
    """The stale holder's write is refused, its guard learns it, and the store is as it was."""
    with pytest.raises(ShardLeaseLost):
        write(stale)
    assert guard.lost
    assert snapshot(new) == before
    with stale.raw() as db:
        assert not db.dbapi.in_transaction  # rolled back, not left holding the write lock


def _record(store: DeliveryStore) -> None:
    record_received(store, page())


def _ingest(store: DeliveryStore) -> None:
    ingest_page(store, page(conversations=("conv-1", "conv-2")))


def _immediate(store: DeliveryStore) -> None:
    with store.raw() as db, immediate(db):
        db.execute("UPDATE account SET identity = 'raw' WHERE id = 'shop'")


@pytest.mark.parametrize("write", [_record, _ingest, _immediate], ids=["record_received", "ingest_page", "immediate"])
def test_raw_writes_of_an_older_grant_are_refused_and_change_nothing(open_store, write):
    add_account(open_store(held(1, owner="a")))
    new = open_store(held(2, owner="b"))
    with new.write():  # claims
        pass
    before = snapshot(new)
    stale_guard = held(1, owner="a")  # not yet lost locally: only the store can tell
    stale = open_store(stale_guard)

    assert_refused(write, stale, stale_guard, new, before)

    write(new)  # the same write under the current grant: it was the fence that refused
    assert snapshot(new) != before


def test_a_guard_past_its_local_deadline_refuses_without_touching_the_store(open_store):
    add_account(open_store(held(1, owner="a")))
    expired = ShardGuard("default", "b")
    expired.hold(2, time.monotonic_ns() - 1)  # a newer grant, but not renewed in time
    store = open_store(expired)
    before = snapshot(store)
    with pytest.raises(ShardLeaseLost, match="not renewed in time"):
        with store.write() as conn:
            conn.execute("UPDATE account SET identity = 'late' WHERE id = 'shop'")
    with pytest.raises(ShardLeaseLost):
        record_received(store, page())
    assert snapshot(store) == before  # in particular: it did not claim the store for grant 2
    assert fence_rows(store) == ([(1, 1, "a")], [(1, "a")])


def test_a_grant_runs_out_by_the_local_clock_alone(open_store):
    guard = ShardGuard("default", "a")
    deadline = time.monotonic_ns() + 300_000_000
    guard.hold(1, deadline)
    store = open_store(guard)
    add_account(store)
    while time.monotonic_ns() < deadline:
        time.sleep(0.01)
    with pytest.raises(ShardLeaseLost):
        with store.write() as conn:
            conn.execute("UPDATE account SET identity = 'late' WHERE id = 'shop'")
    assert identity(store) == "seller-shop"
    guard.hold(1, time.monotonic_ns() + MINUTE_NS)  # renewed: the same grant writes again
    with store.write() as conn:
        conn.execute("UPDATE account SET identity = 'renewed' WHERE id = 'shop'")
    assert identity(store) == "renewed"


def test_migrations_run_unfenced_even_for_a_guard_that_cannot_write(open_store):
    expired = ShardGuard("default", "a")
    expired.hold(1, time.monotonic_ns() - 1)
    store = open_store(expired)  # a fresh file: every migration ran
    with store.read() as conn:
        assert conn.execute("PRAGMA user_version").scalar_one() == LATEST_VERSION
    assert fence_rows(store) == ([], [])
    with pytest.raises(ShardLeaseLost):
        add_account(store)


def test_before_file_write_refuses_for_a_guard_whose_grant_passed_on(open_store, tmp_path: Path):
    old = open_store(held(1, owner="a"))
    add_account(old)
    fence = leases.grant(old, "customer:1", "w1", ttl_s=60)
    assert fence is not None
    log = SessionLog(tmp_path / "s.jsonl.zst", partial(before_file_write, fence))
    log.append("turn/start", turn="t0", batch_id="b1", kind="batch")
    assert log.flush()
    size = log.path.stat().st_size

    with open_store(held(2, owner="b")).write():  # another holder's grant claims the store
        pass
    with pytest.raises(ShardLeaseLost):
        with before_file_write(fence):
            pass
    log.append("turn/start", turn="t1", batch_id="b2", kind="batch")
    with pytest.raises(ShardLeaseLost):
        log.flush()
    assert log.path.stat().st_size == size


def test_before_file_write_refuses_for_a_guard_past_its_deadline(open_store):
    guard = held(1, owner="a")
    store = open_store(guard)
    add_account(store)
    fence = leases.grant(store, "customer:1", "w1", ttl_s=60)
    with before_file_write(fence):  # the lease and the shard are ours
        pass
    guard.hold(1, time.monotonic_ns() - 1)
    with pytest.raises(ShardLeaseLost):
        with before_file_write(fence):
            pass


def test_an_unguarded_store_writes_and_claims_nothing(open_store):
    store = open_store()
    add_account(store)
    result = ingest_page(store, page())
    assert result.rows_written == 1 and not result.replayed
    with store.write() as conn:
        conn.execute("UPDATE account SET identity = 'plain' WHERE id = 'shop'")
    assert identity(store) == "plain"
    assert fence_rows(store) == ([], [])
    guarded = open_store(held(3, owner="a"))  # the first guarded write still claims it
    with guarded.write():
        pass
    assert fence_rows(guarded) == ([(1, 3, "a")], [(3, "a")])


def _update(store: DeliveryStore) -> None:
    with store.write() as conn:
        conn.execute("UPDATE account SET identity = 'stale' WHERE id = 'shop'")


def _swallowed(store: DeliveryStore) -> None:
    """A caller that takes an IntegrityError for a constraint of its own (an import's slice)."""
    with store.write() as conn:
        try:
            conn.execute("UPDATE account SET identity = 'caught' WHERE id = 'shop'")
        except IntegrityError:
            pass


@pytest.mark.parametrize(
    "write",
    [_record, _ingest, _immediate, _update, _swallowed],
    ids=["record_received", "ingest_page", "immediate", "write", "caller-catches-integrity"],
)
def test_a_connection_that_proved_its_grant_is_refused_by_sqlite_once_a_newer_one_claims(open_store, write):
    """After its first write, a connection no longer reads the fence: the rows it writes are
    checked by SQLite. Those of a grant that passed on are refused all the same."""
    stale_guard = held(1, owner="a")
    stale = open_store(stale_guard)
    add_account(stale)
    write(stale)  # every kind of write proves grant 1 on this thread's connection
    statements: list[str] = []
    stale.trace(statements.append)
    _update(stale)
    stale.trace(None)
    assert not any("shard_fence" in s for s in statements)  # no read: the triggers check
    new = open_store(held(2, owner="b"))
    with new.write():  # claims
        pass
    before = snapshot(new)

    assert_refused(write, stale, stale_guard, new, before)


def test_each_table_but_the_fence_has_its_triggers(open_store):
    store = open_store(held(1))
    with store.raw() as db:
        tables = {name for (name,) in db.execute(ORDINARY_TABLES)}
        triggers = {name for (name,) in db.execute("SELECT name FROM sqlite_temp_master WHERE type = 'trigger'")}
    assert {"shard_fence", "shard_grant", "outbox_attempt", "lease", "inbound_message"} <= tables
    expected = {
        f"kefu_fence_{kind}_{t}"
        for t in tables - {"shard_fence", "shard_grant"}
        for kind in ("insert", "update", "delete")
    }
    # A page's messages are fenced by the rows written beside them (the next test).
    assert triggers == expected - {"kefu_fence_insert_inbound_message", "kefu_fence_update_inbound_message"}


@pytest.mark.parametrize("step", ["admit", "pause", "turn"])
def test_each_step_that_writes_a_pages_messages_is_refused_for_a_stale_holder(open_store, settings: Settings, step):
    """Inserts and updates of inbound messages carry no trigger of their own: every step that
    makes them writes a fenced row in the same transaction, so a stale holder's step still
    changes nothing (ingest: the parametrized test above)."""
    stale = open_store(held(1, owner="a"))
    add_account(stale)
    create_route(stale, RouteSpec(id="all", account_id="shop", conversation_type="direct"), op_id="r")
    ingest_page(stale, page())  # pending, not yet admitted
    customer = customer_ids(stale)["conv-1"]
    if step == "turn":
        assert evaluate(stale, customer, 1000).batch_id is not None
    new = open_store(held(2, owner="b"))
    with new.write():  # claims
        pass
    before = snapshot(new)
    with pytest.raises(ShardLeaseLost):
        if step == "admit":
            evaluate(stale, customer, 1000)
        elif step == "pause":
            pause_handling(stale, customer, "an operator takes over")
        else:
            provider = RulesProvider(load_knowledge(None))
            run_turn(stale, provider, customer, settings.sessions_dir, settings.zone, settings.agent)
    assert snapshot(new) == before


def test_a_claim_rolled_back_is_made_again_by_the_next_write(open_store):
    store = open_store(held(1, owner="a"))
    add_account(store)  # grant 1 claimed and proved
    guard = store.guard
    assert guard is not None
    guard.hold(3, time.monotonic_ns() + MINUTE_NS)  # the process was granted the lease again
    with pytest.raises(RuntimeError):
        with store.write() as conn:
            conn.execute("UPDATE account SET identity = 'lost' WHERE id = 'shop'")
            raise RuntimeError("the caller failed")
    assert fence_rows(store)[0] == [(1, 1, "a")]  # the claim went with the rollback
    _update(store)
    assert fence_rows(store) == ([(1, 3, "a")], [(1, "a"), (3, "a")])
    assert identity(store) == "stale"


# --- customer ids ---------------------------------------------------------------------------


def test_customer_id_bases():
    assert customer_id_base("default") == 0
    bases = {name: customer_id_base(name) for name in ("east", "west", "b")}
    assert len(set(bases.values())) == 3
    for name, base in bases.items():
        assert base > 0 and base % ID_RANGE == 0
        assert base + ID_RANGE < 2**63
        assert customer_id_base(name) == base  # stable: a store keeps its base across restarts


def test_new_customers_get_ids_above_the_stores_base(open_store):
    east = customer_id_base("east")
    store = open_store(base=east)
    add_account(store)
    ingest_page(store, page("p1", ("conv-1", "conv-2")))
    assert customer_ids(store) == {"conv-1": east + 1, "conv-2": east + 2}
    ingest_page(store, page("p2", ("conv-2", "conv-3")))  # a known conversation keeps its id
    assert customer_ids(store) == {"conv-1": east + 1, "conv-2": east + 2, "conv-3": east + 3}


def test_each_range_continues_on_its_own_when_customers_of_other_shards_share_the_file(open_store):
    east, west = customer_id_base("east"), customer_id_base("west")
    default = open_store()
    add_account(default, "home")
    ingest_page(default, page("d1", ("d-1",), account="home"))
    east_store = open_store(base=east)  # an account that moved in from shard east...
    add_account(east_store, "moved")
    ingest_page(east_store, page("e1", ("e-1", "e-2"), account="moved"))
    west_store = open_store(base=west)
    add_account(west_store, "other")
    ingest_page(west_store, page("w1", ("w-1",), account="other"))
    # ...does not move the next ids of the ranges below or above it
    ingest_page(default, page("d2", ("d-2",), account="home"))
    ingest_page(east_store, page("e2", ("e-3",), account="moved"))
    assert customer_ids(default) == {
        "d-1": 1,
        "d-2": 2,
        "e-1": east + 1,
        "e-2": east + 2,
        "e-3": east + 3,
        "w-1": west + 1,
    }


# --- takeover: a new grant frees what earlier grants held --------------------------------------


def lease_rows(store: DeliveryStore) -> dict[str, tuple[str, int, int]]:
    with store.read() as conn:
        rows = conn.execute("SELECT name, owner, token, expires_at FROM lease").all()
    return {name: (owner, int(token), int(expires_at)) for name, owner, token, expires_at in rows}


def test_the_claim_of_a_new_grant_lets_go_of_the_leases_earlier_grants_held(open_store):
    old = open_store(held(1, owner="a"))
    add_account(old)
    listener = leases.grant(old, "listener:shop", "a:1", ttl_s=30)
    turn = leases.grant(old, "customer:7", "a:2", ttl_s=600)
    assert listener is not None and turn is not None

    new = open_store(held(2, owner="b"))
    assert leases.grant(new, "listener:shop", "b:1", ttl_s=30) is not None  # at once, not after 30 s
    rows = lease_rows(new)
    assert rows["listener:shop"][:2] == ("b:1", 2)  # a new grant of the lease: a higher token
    assert rows["customer:7"][2] == 1  # lapsed in the claim (its turn is stranded), its row and token kept
    assert leases.grant(new, "customer:7", "b:2", ttl_s=600) is not None

    before = snapshot(new)
    with pytest.raises((ShardLeaseLost, leases.LeaseLost)):  # the old holders write nothing
        with leases.fenced(old, turn) as conn:
            conn.execute("UPDATE account SET identity = 'by-a' WHERE id = 'shop'")
    with pytest.raises(ShardLeaseLost):  # nor does a renewal of the listener's lease
        leases.grant(old, "listener:shop", "a:1", ttl_s=30)
    assert snapshot(new) == before


def test_a_write_under_a_grant_already_claimed_lets_go_of_nothing(open_store):
    store = open_store(held(1, owner="a"))
    add_account(store)
    assert leases.grant(store, "listener:shop", "a:1", ttl_s=30) is not None
    other = open_store(held(1, owner="a"))  # another process of the same instance joins the grant
    assert leases.grant(other, "listener:shop", "a:2", ttl_s=30) is None  # still held
    assert lease_rows(other)["listener:shop"][0] == "a:1"


def test_a_claim_rolled_back_lets_go_of_nothing(open_store):
    old = open_store(held(1, owner="a"))
    add_account(old)
    assert leases.grant(old, "listener:shop", "a:1", ttl_s=30) is not None
    new = open_store(held(2, owner="b"))
    with pytest.raises(RuntimeError):
        with new.write() as conn:
            conn.execute("UPDATE account SET identity = 'x' WHERE id = 'shop'")
            raise RuntimeError("the caller failed")
    assert lease_rows(old)["listener:shop"][0] == "a:1" and lease_rows(old)["listener:shop"][2] > 0
    assert fence_rows(old)[0] == [(1, 1, "a")]


def test_a_new_grant_of_the_same_instance_lets_go_of_nothing(open_store):
    old = open_store(held(1, owner="a"))
    add_account(old)
    assert leases.grant(old, "move:m1", "a:1", ttl_s=30) is not None
    again = open_store(held(2, owner="a"))  # the instance's lease lapsed and it was granted again
    assert leases.grant(again, "move:m1", "a:2", ttl_s=30) is None  # still held: it passes as ever
    assert lease_rows(again)["move:m1"][0] == "a:1"


def test_one_token_granted_to_two_instances_is_kept_by_the_one_that_claimed_the_store(open_store):
    """Redis lost its counter before instance a's grant 3 wrote anything, and b was granted 3
    as well: b claims the store first, so a writes nothing under its copy of the token."""
    first = open_store(held(2, owner="a"))
    add_account(first)
    a, b = open_store(held(3, owner="a")), open_store(held(3, owner="b"))
    add_account(b, "shop-b")
    before = snapshot(b)
    with pytest.raises(ShardLeaseLost, match="instance 'b'"):
        add_account(a, "shop-a")
    assert snapshot(b) == before
    add_account(b, "shop-b2")  # b's writes go on
