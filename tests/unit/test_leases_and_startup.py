"""Writer leases expire with their holder; an unbuilt provider stops startup by name."""

from __future__ import annotations

import time

import pytest

from config import load_settings
from runtime import leases
from runtime.errors import KefuError
from worker.context import WorkerRuntime, build_provider


def test_a_lease_has_one_holder_until_it_expires(store):
    assert leases.acquire(store, "customer:1", "w1", ttl_s=0.2)
    assert not leases.acquire(store, "customer:1", "w2", ttl_s=0.2)
    assert leases.acquire(store, "customer:1", "w1", ttl_s=0.2)  # the holder renews
    time.sleep(0.3)
    assert leases.acquire(store, "customer:1", "w2", ttl_s=0.2)  # the dead holder's lease lapsed
    leases.release(store, "customer:1", "w1")  # a former holder cannot release it
    assert not leases.acquire(store, "customer:1", "w3", ttl_s=0.2)
    leases.release(store, "customer:1", "w2")
    assert leases.acquire(store, "customer:1", "w3", ttl_s=0.2)


def test_an_openai_provider_without_endpoint_settings_stops_startup_naming_them(tmp_path):
    settings = load_settings(data_dir=tmp_path, agent={"provider": "openai", "openai": {"model": "m"}})
    with pytest.raises(KefuError) as raised:
        build_provider(settings)
    assert raised.value.code == "KEFU_PROVIDER_CONFIG"
    assert "KEFU_AGENT__OPENAI__BASE_URL, KEFU_AGENT__OPENAI__API_KEY" in str(raised.value)
    with pytest.raises(KefuError):
        WorkerRuntime(settings).check()


def test_the_rules_provider_loads_the_shipped_faq(tmp_path):
    runtime = WorkerRuntime(load_settings(data_dir=tmp_path))
    runtime.check()
    assert runtime.provider.name == "rules"
    assert runtime.store.user_version() >= 1
