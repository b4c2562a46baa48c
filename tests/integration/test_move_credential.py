"""A moving account's secret never reaches Redis readable (issue 42, item 9): a real move on a
real Redis between two shard stores, steps taken as the shards take them (runtime.placement.moves),
with every command Redis received watched (MONITOR) and every key and value read after each step,
compressed slices opened. The first move to a shard that published no key yet hands the step back
once for a new seal; a move to a shard whose directory pass published its key seals at once."""

from __future__ import annotations

import secrets
import threading
from pathlib import Path

import pytest
import redis
import zstandard

from config import load_settings
from runtime import pipeline
from runtime.accounts.credentials import save_credentials, stored_secret
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.routes import RouteSpec, create_route
from runtime.placement import moves
from runtime.placement.directory import discarder, enter_accounts, rebuild_directory
from runtime.placement.moves import begin_move, load_move
from runtime.placement.shards import customer_id_base
from runtime.store import DeliveryStore
from runtime.store.states import MoveStep
from tests.integration.conftest import REDIS_TEST_DB
from tests.integration.helpers import wait_for
from tests.local_services import Local
from transports.dingtalk.credentials import DingTalkCredentials
from worker.coordination import RedisCoordinator

SECRET = "kefu-secret-" + secrets.token_hex(12)


@pytest.fixture
def redis_url(redis_base_url: str) -> str:
    url = f"{redis_base_url}/{REDIS_TEST_DB}"
    redis.Redis.from_url(url).flushdb()
    return url


def _shard(tmp_path: Path, name: str) -> Local:
    settings = load_settings(data_dir=tmp_path / name, shard=name)
    return Local(
        settings, DeliveryStore(settings.delivery_path, settings.delivery, customer_id_base=customer_id_base(name))
    )


class Watch:
    """Every command Redis receives while it runs (MONITOR), as Redis prints them."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.commands: list[str] = []
        self.end = "watch-ends-" + secrets.token_hex(4)
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._listen, daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    def _listen(self) -> None:
        with self.client.monitor() as monitor:
            self.ready.set()
            for command in monitor.listen():
                self.commands.append(command["command"])
                if self.end in command["command"]:
                    return

    def stop(self) -> list[str]:
        wait_for(lambda: self.client.echo(self.end) is not None and not self.thread.is_alive(), 10, "MONITOR to end")
        return self.commands


def _readable(client: redis.Redis) -> list[bytes]:
    """Every key and value in Redis now, and each value's zstd content (a slice) opened."""
    found: list[bytes] = []
    for key in client.scan_iter():
        kind = client.type(key)
        values = {
            b"string": lambda k: [client.get(k)],
            b"hash": lambda k: [b for pair in client.hgetall(k).items() for b in pair],
            b"list": lambda k: client.lrange(k, 0, -1),
            b"set": lambda k: list(client.smembers(k)),
            b"zset": lambda k: client.zrange(k, 0, -1),
        }[kind](key)
        found.append(key)
        for value in values:
            found.append(value)
            try:
                found.append(zstandard.ZstdDecompressor().decompress(value, max_output_size=64 << 20))
            except zstandard.ZstdError:
                pass
    return found


def _move(coordination: RedisCoordinator, client: redis.Redis, shards: dict[str, Local], op_id: str, to: str) -> list:
    """Take the move's steps as its shards would, reading all of Redis after each."""
    record = begin_move(coordination, op_id, "ding", to)
    seen = [_readable(client)]
    for _ in range(20):
        if record.step in moves.FINAL_STEPS:
            break
        moves.advance(shards[record.actor()], coordination, op_id)
        seen.append(_readable(client))
        record = load_move(coordination, op_id)
    assert record.step == MoveStep.DONE, record
    return seen


def test_a_moving_accounts_secret_never_reaches_redis_readable(tmp_path, redis_url):
    a, b = _shard(tmp_path, "a"), _shard(tmp_path, "b")
    credentials = DingTalkCredentials(client_id="ding-app", client_secret=SECRET, robot_code="robot-1").storable()
    create_account(a.store, AccountSpec(id="ding", platform="dingtalk", identity="robot-1"))
    with a.store.write() as conn:
        save_credentials(conn, "ding", credentials)
    create_route(a.store, RouteSpec(id="ding-direct", account_id="ding", conversation_type="direct"), "op-r")
    with a.store.read() as conn:
        stored = stored_secret(conn, "ding")
    assert SECRET in stored
    coordination, client = RedisCoordinator(redis_url), redis.Redis.from_url(redis_url)
    enter_accounts(a.store, coordination, "a")
    watch = Watch(redis_url)
    try:
        first = _move(coordination, client, {"a": a, "b": b}, "m1", "b")  # b has published no key yet
        rebuild_directory(a.store, coordination, "a", pipeline.resume, discarder(a.store, None, *moves._dirs(a)))
        back = _move(coordination, client, {"a": a, "b": b}, "m2", "a")  # a's directory pass published its key
    finally:
        commands = watch.stop()

    assert any("m1:slice" in c for c in commands) and any("m1:credential" in c for c in commands)
    for snapshot in [*first, *back]:
        assert not [value for value in snapshot if SECRET.encode() in value]
    assert not [c for c in commands if SECRET in c]
    assert load_move(coordination, "m1").detail.get("reseals") == 1  # b asked once for a seal to its key
    assert "reseals" not in load_move(coordination, "m2").detail  # sealed to a's key at once
    with a.store.read() as conn:  # it arrived whole, twice, and went from where it left
        assert stored_secret(conn, "ding") == stored
    with b.store.read() as conn:
        assert stored_secret(conn, "ding") is None
    a.store.close()
    b.store.close()
