"""Shards for real (SPEC 3.12): two shards on one Redis, each with its own worker (embedded beat
and listeners) and data dir, buyers of four simulated accounts on one simulated platform; an
account moved under traffic, with its mover killed midway; a standby taking over a killed
holder; a holder stopped past its lease writing nothing when it wakes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from config import Settings, load_settings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.routes import RouteSpec, create_route
from runtime.memory.engine import scope_of
from runtime.memory.store import MemoryStore
from runtime.placement.moves import load_move
from runtime.store import DeliveryStore, immediate
from tests.integration.conftest import REDIS_TEST_DB
from tests.integration.helpers import wait_for
from transports.simulator import SimulatedPlatform
from transports.simulator.buyers import SteadyBuyers
from worker.audit import audit
from worker.celery_app import make_app
from worker.coordination import RedisCoordinator
from worker.process import WorkerProcess

BIN = Path(sys.executable).parent
LEASE_S = 3.0


@dataclass
class Shard:
    name: str
    settings: Settings
    store: DeliveryStore
    workers: list[WorkerProcess] = field(default_factory=list)
    extra: dict[str, str] = field(default_factory=dict)

    def env(self, instance: str) -> dict[str, str]:
        return {
            "KEFU_SHARD": self.name,
            "KEFU_DATA_DIR": str(self.settings.data_dir),
            "KEFU_BROKER_URL": self.settings.broker_url,
            "KEFU_INSTANCE": instance,
            "KEFU_SHARD_LEASE_S": str(LEASE_S),
            "KEFU_SIMULATOR__PLATFORM_PATH": str(self.settings.simulator_path),
            "KEFU_RECONCILE__INTERVAL_S": "0.5",
            "KEFU_RECONCILE__GRACE_S": "2",
            "KEFU_LISTENER__SUPERVISE_INTERVAL_MS": "100",
            "KEFU_LISTENER__LEASE_S": "3",
            **self.extra,
        }

    def start(self, instance: str, wait: bool = True) -> WorkerProcess:
        log = self.settings.data_dir / f"worker-{instance}.log"
        worker = WorkerProcess(self.env(instance), log, listen=True, clean_env=True).start()
        self.workers.append(worker)
        if wait:
            worker.wait_ready(make_app(self.settings), timeout_s=60)
        return worker

    def grants(self) -> list[tuple[int, str]]:
        with self.store.read() as conn:
            return [tuple(row) for row in conn.execute("SELECT token, owner FROM shard_grant ORDER BY token")]


@pytest.fixture
def redis_url(redis_base_url: str) -> str:
    url = f"{redis_base_url}/{REDIS_TEST_DB}"
    redis.Redis.from_url(url).flushdb()
    return url


@pytest.fixture
def make_shard(tmp_path: Path, redis_url: str) -> Iterator:
    """Shards on Redis, each with its own data dir; `embedded=True`: on the embedded broker, all
    in one data dir (one machine)."""
    made: list[Shard] = []

    def make(name: str, accounts: list[str], embedded: bool = False) -> Shard:
        settings = load_settings(
            data_dir=tmp_path / ("var" if embedded else name),
            broker_url="embedded" if embedded else redis_url,
            shard=name,
            simulator={"platform_path": tmp_path / "platform.sqlite"},
        )
        store = DeliveryStore(settings.delivery_path, settings.delivery)
        for account in accounts:
            create_account(store, AccountSpec(id=account, platform="simulator", identity=f"seller-{account}"))
            create_route(
                store, RouteSpec(id=f"{account}-direct", account_id=account, conversation_type="direct"), f"r-{account}"
            )
        made.append(shard := Shard(name, settings, store))
        return shard

    yield make
    for shard in made:
        for worker in shard.workers:
            worker.stop()
        shard.store.close()


def returning_buyers(platform: SimulatedPlatform, accounts: list[str], per_s: float) -> SteadyBuyers:
    """Buyers of each account at a steady rate; seven of them come back, so sessions grow."""
    return SteadyBuyers(platform, accounts, per_s, buyer=lambda n: f"b{n % 7}")


def _all_answered(homes: dict[str, DeliveryStore], platform: SimulatedPlatform, timeout_s: float = 60) -> None:
    def done() -> bool:
        results = [audit(store, platform, account) for account, store in homes.items()]
        return all(r.answered == r.buyer_messages and r.buyer_messages > 0 for r in results)

    wait_for(
        done,
        timeout_s,
        "every buyer message of every account to be answered",
        lambda: {account: audit(store, platform, account) for account, store in homes.items()},
    )
    for account, store in homes.items():
        result = audit(store, platform, account)
        assert (result.duplicate_replies, result.lost) == (0, 0), (account, result)


def _folders(shard: Shard, customer_id: int) -> int:
    if not shard.settings.memory_path.exists():
        return 0
    memory = MemoryStore(shard.settings.memory_path)
    try:
        return len(memory.folders(scope_of(customer_id)))
    finally:
        memory.close()


def _kefu(args: list[str], env: dict[str, str], timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "kefu"), *args],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("KEFU_")},
            "KEFU_LANGUAGE": "en",  # the words asserted here are English (kefu speaks Chinese by default)
            **env,
            "COLUMNS": "200",
        },
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def _count(store: DeliveryStore, query: str, *params: object) -> int:
    with store.read() as conn:
        return int(conn.execute(query, params).scalar_one())


def test_two_shards_answer_their_accounts_and_an_account_moves_under_traffic_with_its_mover_killed(
    make_shard, redis_url
):
    a = make_shard("a", ["shop-1", "shop-2"])
    b = make_shard("b", ["shop-3", "shop-4"])
    for shard in (a, b):  # a small context window: turns are archived into memory folders soon
        shard.extra = {"KEFU_AGENT__CONTEXT_WINDOW_TOKENS": "1000", "KEFU_MEMORY__ALLOW_SMALL_WINDOW": "true"}
    platform = SimulatedPlatform(a.settings.simulator_path)
    a.start("host-a")
    b.start("host-b")
    coordination = RedisCoordinator(redis_url)
    assert {p.account_id: p.shard for p in coordination.placements()} == {
        "shop-1": "a",
        "shop-2": "a",
        "shop-3": "b",
        "shop-4": "b",
    }

    with returning_buyers(platform, ["shop-1", "shop-2", "shop-3", "shop-4"], per_s=12):
        wait_for(
            lambda: _count(a.store, "SELECT count(*) FROM outbox_request WHERE state = 'sent'") >= 6,
            30,
            "replies on shard a",
        )
        with a.store.read() as conn:
            [reader_of] = conn.execute("SELECT min(id) FROM customer WHERE account_id = 'shop-1'").one()
        wait_for(lambda: _folders(a, reader_of) > 0, 60, "memory folders of a shop-1 customer on shard a")
        marked = _kefu(["read", str(reader_of)], a.env("host-a"))  # an operator's read mark moves along
        assert marked.returncode == 0, marked.stdout
        mover = subprocess.Popen(
            [str(BIN / "kefu"), "accounts", "move", "shop-1", "--to", "b", "--op-id", "move-1"],
            env={**os.environ, **a.env("mover")},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(
            lambda: (m := load_move(coordination, "move-1")) is not None and m.step != "stopping",
            60,
            "the move to get past stopping",
        )
        mover.send_signal(signal.SIGKILL)
        mover.wait()
        interrupted = load_move(coordination, "move-1")
        assert interrupted is not None and interrupted.step != "done"
        rerun = _kefu(["accounts", "move", "shop-1", "--to", "b", "--op-id", "move-1"], a.env("mover"))
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        assert "move move-1: done" in rerun.stdout
        time.sleep(2)  # traffic to the moved account goes on, now to shard b

    _all_answered({"shop-1": b.store, "shop-2": a.store, "shop-3": b.store, "shop-4": b.store}, platform)
    replay = _kefu(["accounts", "move", "shop-1", "--to", "b", "--op-id", "move-1"], a.env("mover"))
    assert replay.returncode == 0 and "move move-1: done" in replay.stdout  # the recorded result

    assert coordination.placement("shop-1").model_dump() == {
        "account_id": "shop-1",
        "shard": "b",
        "generation": 2,
        "state": "active",
        "move": None,
    }
    # Shard a keeps nothing live for it: no account, customers, sends; a tombstone forwards.
    for table in ("account", "customer", "inbound_message", "outbox_request"):
        column = "id" if table == "account" else "account_id"
        assert _count(a.store, f"SELECT count(*) FROM {table} WHERE {column} = ?", "shop-1") == 0, table
    assert (
        _count(a.store, "SELECT count(*) FROM received_page WHERE account_id = ? AND ingested_at IS NULL", "shop-1")
        == 0
    )
    with a.store.read() as conn:
        assert conn.execute("SELECT shard, state FROM account_placement WHERE account_id = 'shop-1'").one() == (
            "b",
            "moved",
        )
    # Shard b has its whole history: every buyer line, every reply sent once, its cursor.
    lines = _count(
        b.store, "SELECT count(*) FROM inbound_message WHERE account_id = ? AND sender_role = 'external'", "shop-1"
    )
    assert lines == len(platform.buyer_messages("shop-1"))
    assert _count(
        b.store, "SELECT count(*) FROM outbox_request WHERE account_id = ? AND state = 'sent'", "shop-1"
    ) == len(platform.received("shop-1"))
    assert _count(b.store, "SELECT count(*) FROM provider_cursor WHERE account_id = ?", "shop-1") == 1
    assert _folders(b, reader_of) > 0 and _folders(a, reader_of) == 0  # its memory moved along
    with b.store.read() as conn:
        watermark = conn.execute(
            "SELECT w.watermark FROM reader_watermark w WHERE w.customer_id = ? AND w.reader = 'operator'",
            (reader_of,),
        ).scalar_one()
        assert (
            conn.execute(  # it names one of the customer's messages as numbered on b
                "SELECT customer_id FROM inbound_message WHERE id = ?", (watermark,)
            ).scalar_one()
            == reader_of
        )

    shards = _kefu(["shards", "--json"], a.env("viewer"))
    assert shards.returncode == 0
    assert '"shard": "a", "holder": "host-a"' in shards.stdout and '"shard": "b", "holder": "host-b"' in shards.stdout


def test_a_page_that_reaches_the_wrong_shard_is_forwarded_and_answered_once(make_shard, redis_url):
    a = make_shard("a", ["shop-1"])
    b = make_shard("b", ["shop-3"])
    platform = SimulatedPlatform(a.settings.simulator_path)
    a.start("host-a")
    b.start("host-b")
    platform.buyer_says("shop-3", "b1", "买家b1", "请问什么时候发货？")
    from transports.simulator import SimulatorTransport

    page = SimulatorTransport(platform).page_after("shop-3", None)
    assert page is not None
    make_app(a.settings).send_task("kefu.ingest.page", (page.model_dump(mode="json"),), queue="kefu.ingest.a")
    _all_answered({"shop-3": b.store}, platform)
    assert _count(a.store, "SELECT count(*) FROM inbound_message") == 0


def _standby_pair(make_shard) -> tuple[Shard, WorkerProcess, WorkerProcess, SimulatedPlatform]:
    a = make_shard("a", ["shop-1"])
    # A holder killed mid-turn leaves that customer's writer lease to run out: short here, so
    # the standby answers that buyer within the test's wait too (the default is 600 s).
    a.extra = {"KEFU_AGENT__TURN_LEASE_S": "5"}
    platform = SimulatedPlatform(a.settings.simulator_path)
    holder = a.start("host-1")
    standby = a.start("host-2", wait=False)
    coordination = RedisCoordinator(a.settings.broker_url)
    wait_for(lambda: coordination.standbys("a") == ["host-2"], 30, "the standby to announce itself")
    return a, holder, standby, platform


def test_a_standby_takes_over_a_killed_holder_and_no_two_holders_wrote(make_shard):
    a, holder, standby, platform = _standby_pair(make_shard)
    with returning_buyers(platform, ["shop-1"], per_s=8):
        wait_for(
            lambda: _count(a.store, "SELECT count(*) FROM outbox_request WHERE state = 'sent'") >= 5,
            30,
            "replies from the holder",
        )
        holder.kill()
        killed_at = time.monotonic()
        wait_for(lambda: len(a.grants()) == 2, LEASE_S + 15, "the standby to take the lease and write")
        took_over_s = time.monotonic() - killed_at
        time.sleep(2)
    _all_answered({"shop-1": a.store}, platform)
    assert took_over_s < LEASE_S + 10
    assert [owner for _, owner in a.grants()] == ["host-1", "host-2"]
    first, second = (token for token, _ in a.grants())
    assert second > first
    with a.store.read() as conn:
        last_of_first = conn.execute(
            "SELECT max(started_at) FROM outbox_attempt WHERE shard_token = ?", (first,)
        ).scalar_one()
        first_of_second = conn.execute(
            "SELECT min(started_at) FROM outbox_attempt WHERE shard_token = ?", (second,)
        ).scalar_one()
    assert last_of_first < first_of_second  # the two holders' sends never interleave


def _stop_between_writes(store: DeliveryStore, process: WorkerProcess) -> None:
    """SIGSTOP a worker between two of its write transactions: the test holds the store's write
    lock meanwhile. (A process stopped inside one keeps SQLite's write lock, which no standby
    can take over: every writer of the file waits for it. That is not what these tests ask.)"""
    with store.raw() as db, immediate(db):
        os.killpg(process.pid, signal.SIGSTOP)


def test_a_holder_stopped_past_its_lease_writes_nothing_when_it_wakes(make_shard):
    a, holder, standby, platform = _standby_pair(make_shard)
    platform.buyer_says("shop-1", "b1", "买家b1", "请问什么时候发货？")
    _all_answered({"shop-1": a.store}, platform)
    _stop_between_writes(a.store, holder)
    try:
        wait_for(lambda: len(a.grants()) == 2, LEASE_S + 15, "the standby to take over")
        first, second = (token for token, _ in a.grants())
        platform.buyer_says("shop-1", "b2", "买家b2", "可以退货吗？")
        _all_answered({"shop-1": a.store}, platform)
        written_by_first = _count(a.store, "SELECT count(*) FROM outbox_attempt WHERE shard_token = ?", first)
    finally:
        os.killpg(holder.pid, signal.SIGCONT)
    platform.buyer_says("shop-1", "b3", "买家b3", "能开发票吗？")
    wait_for(lambda: not holder.running(), 30, "the woken holder to find its lease lost and stop")
    assert "KEFU_SHARD_LEASE_LOST" in holder.output()
    _all_answered({"shop-1": a.store}, platform)
    assert _count(a.store, "SELECT count(*) FROM outbox_attempt WHERE shard_token = ?", first) == written_by_first
    assert [owner for _, owner in a.grants()] == ["host-1", "host-2"]


def test_a_move_refused_for_a_disagreeing_cursor_changes_nothing_and_rolls_back(make_shard, redis_url):
    a = make_shard("a", ["shop-1"])
    b = make_shard("b", [])
    platform = SimulatedPlatform(a.settings.simulator_path)
    a.start("host-a")
    b.start("host-b")
    platform.buyer_says("shop-1", "b1", "买家b1", "请问什么时候发货？")
    _all_answered({"shop-1": a.store}, platform)
    with a.store.read() as conn:
        [stream] = conn.execute("SELECT stream_id FROM provider_cursor WHERE account_id = 'shop-1'").one()
    # shop-1 lived on b once: deleted there, its cursor left behind at another place.
    create_account(b.store, AccountSpec(id="shop-1", platform="simulator", identity="seller-shop-1"))
    with b.store.write() as conn:
        conn.execute("UPDATE account SET deleted_at = 1 WHERE id = 'shop-1'")
        conn.execute(
            "INSERT INTO provider_cursor (account_id, stream_id, cursor, page_op_id, updated_at)"
            " VALUES ('shop-1', ?, 'elsewhere', 'old-page', 1)",
            (stream,),
        )
    before = _count(b.store, "SELECT count(*) FROM inbound_message") + _count(b.store, "SELECT count(*) FROM customer")

    refused = _kefu(["accounts", "move", "shop-1", "--to", "b", "--op-id", "move-c"], a.env("mover"))
    assert refused.returncode == 2 and "KEFU_CHECKPOINT_CURSOR_CONFLICT" in refused.stdout, refused.stdout
    after = _count(b.store, "SELECT count(*) FROM inbound_message") + _count(b.store, "SELECT count(*) FROM customer")
    assert after == before
    with b.store.read() as conn:
        assert conn.execute("SELECT cursor FROM provider_cursor WHERE account_id = 'shop-1'").scalar_one() == (
            "elsewhere"
        )

    rolled = _kefu(["accounts", "move", "shop-1", "--to", "b", "--op-id", "move-c", "--rollback"], a.env("mover"))
    assert rolled.returncode == 0 and "move move-c: rolled-back" in rolled.stdout, rolled.stdout
    coordination = RedisCoordinator(redis_url)
    assert coordination.placement("shop-1").model_dump() == {
        "account_id": "shop-1",
        "shard": "a",
        "generation": 1,
        "state": "active",
        "move": None,
    }
    platform.buyer_says("shop-1", "b2", "买家b2", "可以退货吗？")  # a is serving it again
    _all_answered({"shop-1": a.store}, platform)


def test_on_the_embedded_broker_two_shards_of_one_data_dir_move_an_account(make_shard):
    a = make_shard("a", ["shop-1", "shop-2"], embedded=True)
    b = make_shard("b", ["shop-3"], embedded=True)
    platform = SimulatedPlatform(a.settings.simulator_path)
    a.start("host")
    b.start("host")
    with returning_buyers(platform, ["shop-1", "shop-2", "shop-3"], per_s=6):
        wait_for(
            lambda: _count(a.store, "SELECT count(*) FROM outbox_request WHERE state = 'sent'") >= 3,
            30,
            "replies on shard a",
        )
        moved = _kefu(["accounts", "move", "shop-1", "--to", "b"], a.env("host"))
        assert moved.returncode == 0 and ": done in" in moved.stdout, moved.stdout
        time.sleep(2)
    _all_answered({"shop-1": b.store, "shop-2": a.store, "shop-3": b.store}, platform)
    shards = _kefu(["shards", "--json"], a.env("host"))
    assert '"shard": "b", "holder": "host"' in shards.stdout and '"accounts": ["shop-1", "shop-3"]' in shards.stdout
    status = _kefu(["status", "--all"], a.env("host"))
    assert status.returncode == 0 and "shard a" in status.stdout and "shard b" in status.stdout, status.stdout


def test_a_move_with_either_side_killed_midway_goes_on_when_they_are_back(make_shard, redis_url):
    a = make_shard("a", ["shop-1"])
    b = make_shard("b", ["shop-3"])
    platform = SimulatedPlatform(a.settings.simulator_path)
    a.start("host-a")
    b.start("host-b").kill()  # the target is down when the move begins
    platform.buyer_says("shop-1", "b1", "买家b1", "请问什么时候发货？")
    _all_answered({"shop-1": a.store}, platform)

    stuck = _kefu(["accounts", "move", "shop-1", "--to", "b", "--op-id", "move-k", "--timeout", "8"], a.env("mover"))
    assert stuck.returncode == 2 and "KEFU_PLACEMENT_TIMEOUT" in stuck.stdout, stuck.stdout
    coordination = RedisCoordinator(redis_url)
    # the source did its part (a target killed as it started may have imported, not flipped)
    assert load_move(coordination, "move-k").step in ("exported", "imported")
    platform.buyer_says("shop-1", "b2", "买家b2", "可以退货吗？")  # held on a, not lost
    a.workers[-1].kill()  # and now the source dies too
    b.start("host-b")
    a.start("host-a")
    done = _kefu(["accounts", "move", "shop-1", "--to", "b", "--op-id", "move-k"], a.env("mover"))
    assert done.returncode == 0 and "move move-k: done" in done.stdout, done.stdout
    _all_answered({"shop-1": b.store}, platform)
