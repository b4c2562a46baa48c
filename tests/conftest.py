"""Shared fixtures: settings on a temporary data dir, a delivery store, a simulated shop."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from config import Settings, load_settings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.routes import RouteSpec, create_route
from runtime.store import DeliveryStore
from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.wangwang import FakeWangwangBridge
from transports.dingtalk.credentials import DingTalkCredentials
from transports.simulator import SimulatedPlatform, SimulatorTransport

ACCOUNT = "shop"


# The suite reads kefu's words in English (their msgids); the Chinese default has tests of its
# own (tests/unit/test_i18n_*.py, tests/integration/test_console_chinese.py). Set at import too:
# a test module that imports worker.celery_app at collection builds its settings before any
# fixture runs.
os.environ["KEFU_LANGUAGE"] = "en"


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No developer's KEFU_* variables, .env or kefu.toml leak into a test."""
    for name in list(os.environ):
        if name.startswith("KEFU_") and name != "KEFU_TEST_REDIS_URL":
            monkeypatch.delenv(name)
    monkeypatch.setenv("KEFU_LANGUAGE", "en")  # as at import (above)
    monkeypatch.chdir(tmp_path)


@pytest.fixture(autouse=True)
def _no_shard_lease_outlives_its_test() -> Iterator[None]:
    """A test that ran a worker or a command in this process (Celery's testing worker, a
    worker_init signal, runtime_for) held its shard's lease; it is let go with the test, or its
    renewals would go on against the next test's Redis and data dir."""
    yield
    from worker.shard_lease import release_shard

    release_shard()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(data_dir=tmp_path / "var")


@pytest.fixture
def store(settings: Settings) -> DeliveryStore:
    store = DeliveryStore(settings.delivery_path, settings.delivery)
    yield store
    store.close()


@pytest.fixture
def shop(store: DeliveryStore) -> str:
    create_account(store, AccountSpec(id=ACCOUNT, platform="simulator", identity="seller-1"))
    create_route(store, RouteSpec(id="all-direct", account_id=ACCOUNT, conversation_type="direct"), op_id="op-all")
    return ACCOUNT


@pytest.fixture
def platform(settings: Settings) -> SimulatedPlatform:
    return SimulatedPlatform(settings.simulator_path)


@pytest.fixture
def transport(platform: SimulatedPlatform) -> SimulatorTransport:
    return SimulatorTransport(platform)


@pytest.fixture
def fake_dingtalk() -> Iterator[FakeDingTalk]:
    """A local DingTalk (OpenAPI and Stream gateway) on loopback."""
    fake = FakeDingTalk().start()
    yield fake
    fake.stop()


@pytest.fixture
def fake_wangwang() -> Iterator[FakeWangwangBridge]:
    """A local Wangwang bridge speaking docs/wangwang-gateway.md."""
    bridge = FakeWangwangBridge().start()
    yield bridge
    bridge.stop()


@pytest.fixture
def kefu(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    """The `kefu` command in this process, on the test's data dir."""
    from worker.celery_app import app
    from worker.context import runtime_for

    monkeypatch.setattr(app, "kefu_settings", settings, raising=False)
    monkeypatch.setattr(app, "kefu_runtime", None, raising=False)
    yield CliRunner()
    if app.kefu_runtime is not None:
        runtime_for(app).store.close()


@pytest.fixture
def credentials(fake_dingtalk: FakeDingTalk) -> DingTalkCredentials:
    """The fake DingTalk's app and robot, as an account stores them."""
    return DingTalkCredentials(
        client_id=fake_dingtalk.client_id,
        client_secret=fake_dingtalk.client_secret,
        robot_code=fake_dingtalk.robot_code,
    )
