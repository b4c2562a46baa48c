"""compose.yaml run as its own commands and health checks, on this machine's Redis (no Docker
engine runs here): the worker, beat, the listener and the console receive and answer a buyer
through the listener, and each health check passes. The Dockerfile runs kefu unprivileged."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes.openai_server import FakeOpenAI
from tests.integration.helpers import wait_all_answered, wait_for
from worker.audit import audit

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())  # merge keys (<<) resolved
KEFU_SERVICES = ("worker", "beat", "listener", "console", "flower")


def test_every_kefu_service_restarts_and_the_image_runs_unprivileged():
    services = COMPOSE["services"]
    assert set(KEFU_SERVICES) <= set(services)
    for name in KEFU_SERVICES:
        assert services[name]["restart"] == "unless-stopped", name
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy", name
    assert {name for name, spec in services.items() if "healthcheck" in spec} == {
        "redis",
        "worker",
        "console",
        "flower",
    }
    assert all(port.startswith("127.0.0.1:") for name in ("console", "flower") for port in services[name]["ports"])
    dockerfile = (ROOT / "Dockerfile").read_text().splitlines()
    user = [line for line in dockerfile if line.startswith("USER ")]
    assert user == ["USER kefu"] and dockerfile.index("USER kefu") > dockerfile.index(
        "RUN pip install --no-cache-dir ."
    )


def _local(argv: list[str], ports: dict[str, str]) -> list[str]:
    """A container's command on this machine: this venv's executables, free ports for the
    console's and Flower's."""
    head = str(BIN / argv[0]) if (BIN / argv[0]).exists() else argv[0]
    args = argv[1:]
    for published, free in ports.items():
        args = [arg.replace(published, free) for arg in args]
    return [head, *args]


def _check(spec: dict[str, Any], env: dict[str, str], ports: dict[str, str]) -> bool:
    """The service's health check as Docker runs it, within its own timeout."""
    test, timeout = spec["healthcheck"]["test"], float(spec["healthcheck"]["timeout"].removesuffix("s"))
    try:
        if test[0] == "CMD-SHELL":
            command = test[1].replace("$$", "$").replace("celery ", f"{BIN / 'celery'} ", 1)
            run = subprocess.run(command, shell=True, env=env, capture_output=True, timeout=timeout)
        else:
            run = subprocess.run(_local(test[1:], ports), env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return run.returncode == 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("broker_url", ["redis"], indirect=True)
@pytest.mark.parametrize("agent", ["rules", "openai"])
def test_compose_services_receive_answer_and_pass_their_health_checks(settings, store, shop, platform, agent):
    """With the rules agent the worker runs a prefork pool; with a network model (kefu.env
    naming one) the same command runs a thread pool, and answers through it."""
    services, ports = COMPOSE["services"], {"8470": str(_free_port()), "5555": str(_free_port())}
    env = {
        **os.environ,
        **{key: str(value) for key, value in services["worker"]["environment"].items()},
        "KEFU_BROKER_URL": settings.broker_url,
        "KEFU_DATA_DIR": str(settings.data_dir),
        "HOSTNAME": socket.gethostname(),  # the worker's node name, as in a container
        "COLUMNS": "200",
    }
    with ExitStack() as stack:
        if agent == "openai":
            model = stack.enter_context(FakeOpenAI())
            env |= {
                "KEFU_AGENT__PROVIDER": "openai",
                "KEFU_AGENT__OPENAI__BASE_URL": model.base_url,
                "KEFU_AGENT__OPENAI__API_KEY": "compose-test",
                "KEFU_AGENT__OPENAI__MODEL": "fake",
            }
        _run_services(settings, store, shop, platform, services, env, ports)
    pool = "(thread)" if agent == "openai" else "(prefork)"
    banner = next(
        line for line in (settings.data_dir / "worker.log").read_text().splitlines() if "concurrency:" in line
    )
    assert pool in banner, banner


def _run_services(
    settings: Any,
    store: Any,
    shop: str,
    platform: Any,
    services: dict[str, Any],
    env: dict[str, str],
    ports: dict[str, str],
) -> None:
    started: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name in KEFU_SERVICES:
            started[name] = subprocess.Popen(
                _local(services[name]["command"], ports),
                env=env,
                stdout=open(settings.data_dir / f"{name}.log", "wb"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        for name in ("worker", "console", "flower"):
            wait_for(lambda name=name: _check(services[name], env, ports), 90, f"{name}'s health check")
        for buyer, text in [("b1", "在吗"), ("b2", "什么时候发货")]:
            platform.buyer_says(shop, buyer, f"买家{buyer}", text)
        result = wait_all_answered(store, platform, shop, timeout_s=60)
        assert (result.buyer_messages, result.answered, result.duplicate_replies) == (2, 2, 0)
        assert all(process.poll() is None for process in started.values()), "a service exited"
    finally:
        for process in started.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        codes = {name: process.wait(30) for name, process in started.items()}
    logs = {name: (settings.data_dir / f"{name}.log").read_text(errors="replace") for name in started}
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it: the console ends by the signal.
    assert codes == {"worker": 0, "beat": 0, "listener": 0, "console": -signal.SIGTERM, "flower": 0}, logs
    assert f"listener {shop}: running" in logs["listener"]  # the listener, not the reconciler, took them in
    assert audit(store, platform, shop).duplicate_replies == 0
