"""Per-task metrics and the worker's heartbeat, from a real worker on a real broker (issue 43):
task runs reach the store's counters (and /metrics) from a thread pool and from prefork pool
processes; `kefu health` is healthy while the worker consumes and unhealthy once it stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.helpers import wait_for, worker_env
from worker.celery_app import make_app
from worker.console.metrics import registry_for

BIN = Path(sys.executable).parent
NODE = "celery@kefu-metrics-test"


def healthy(env: dict[str, str]) -> int:
    return subprocess.run([str(BIN / "kefu"), "health", "--node", NODE], env=env, capture_output=True).returncode


@pytest.mark.parametrize("broker_url", ["redis"], indirect=True)
@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_task_runs_are_counted_and_the_health_check_follows_the_worker(settings, store, pool):
    env = {**os.environ, **worker_env(settings), "KEFU_LANGUAGE": "en"}
    assert healthy(env) == 2  # no worker yet
    log = settings.data_dir / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [str(BIN / "celery"), "-A", "worker", "worker", "-l", "info", "-P", pool, "-c", "1", "-n", NODE],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: healthy(env) == 0, 90, "the worker's first heartbeat", lambda: log.read_text()[-2000:])
        app = make_app(settings)
        app.send_task("kefu.ingest.probe_chain", args=("metrics-probe",))
        assert app.AsyncResult("metrics-probe").get(timeout=90) > 0  # the chain's last hop ran
    finally:
        worker.send_signal(signal.SIGTERM)  # a warm shutdown: the tallies are added to the store
        worker.wait(90)
    assert worker.returncode == 0, log.read_text()[-3000:]
    assert healthy(env) == 2  # stopped: its heartbeat is gone

    text = generate_latest(registry_for(store, settings)).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    for hop in ("ingest", "agent", "outbox", "receipts"):
        task = f"kefu.{hop}.probe_chain"
        assert samples[("kefu_task_runs_total", (("shard", "default"), ("state", "SUCCESS"), ("task", task)))] == 1
        assert samples[("kefu_task_seconds_count", (("shard", "default"), ("task", task)))] == 1
        assert samples[("kefu_task_seconds_sum", (("shard", "default"), ("task", task)))] > 0
