"""An idle worker is quiet and stops cleanly (issue 43, item 7): a real `celery -A worker worker
-B -l info` as the README starts it logs at most 5 lines a minute at info and above while beat's
housekeeping runs every few seconds; SIGTERM ends it without a traceback; a worker SIGSTOPped
past its shard lease says so in one KEFU_ line when it runs again and shuts down without one."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import redis

from config import load_settings
from tests.integration.conftest import REDIS_TEST_DB
from tests.integration.helpers import wait_for
from worker.celery_app import make_app
from worker.process import KefuProcess

WINDOW_S = 60
MAX_LINES = 5
LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+: (DEBUG|INFO|WARNING|ERROR|CRITICAL)/", re.M)


class ReadmeWorker(KefuProcess):
    """`celery -A worker worker -l info -B`, Celery's default pool, nothing else."""

    def command(self) -> list[str]:
        schedule = str(Path(self.env["KEFU_DATA_DIR"]) / "beat-schedule-readme")
        return [sys.executable, "-m", "celery", "-A", "worker", "worker", "-l", "info", "-B", "-s", schedule]


@pytest.fixture
def broker(redis_base_url: str) -> str:
    url = f"{redis_base_url}/{REDIS_TEST_DB}"
    redis.Redis.from_url(url).flushdb()
    return url


def _worker(tmp_path: Path, broker: str, **extra: str) -> ReadmeWorker:
    env = {"KEFU_DATA_DIR": str(tmp_path / "var"), "KEFU_BROKER_URL": broker, **extra}
    return ReadmeWorker(env, tmp_path / "worker.log", clean_env=True, cwd=Path(__file__).parents[2])


def _ready(worker: KefuProcess) -> None:
    wait_for(lambda: " ready." in worker.output() or not worker.running(), 90, "ready", worker.output)
    assert worker.running(), worker.output()


def _lines_between(output: str, start: datetime, end: datetime) -> list[str]:
    """The lines logged at info or above within [start, end)."""
    found = []
    for match in LINE.finditer(output):
        at = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S")
        if match.group(2) != "DEBUG" and start <= at < end:
            found.append(output[match.start() : output.find("\n", match.start())])
    return found


def test_an_idle_worker_logs_at_most_five_lines_a_minute(tmp_path, broker):
    worker = _worker(tmp_path, broker).start()
    try:
        _ready(worker)
        start = datetime.now().replace(microsecond=0)
        start_s = time.monotonic()
        wait_for(lambda: time.monotonic() - start_s > WINDOW_S + 2 or not worker.running(), WINDOW_S + 30, "a minute")
        assert worker.running(), worker.output()
        app = make_app(load_settings(data_dir=tmp_path / "inspector", broker_url=broker))
        try:
            stats = app.control.inspect(timeout=10).stats() or {}
        finally:
            app.close()
        totals: dict[str, int] = {}
        for node in stats.values():
            for task, count in node.get("total", {}).items():
                totals[task] = totals.get(task, 0) + count
        # beat's housekeeping did run meanwhile (alerts every 5 s by default)
        assert totals.get("kefu.receipts.alerts", 0) >= 10, totals
        lines = _lines_between(worker.output(), start, datetime.fromtimestamp(start.timestamp() + WINDOW_S))
        assert len(lines) <= MAX_LINES, "\n".join(lines)
    finally:
        worker.stop()


def test_sigterm_stops_an_idle_worker_cleanly(tmp_path, broker):
    worker = _worker(tmp_path, broker).start()
    try:
        _ready(worker)
        assert worker.proc is not None
        os.killpg(worker.proc.pid, signal.SIGTERM)
        worker.proc.wait(60)
        output = worker.output()
        assert worker.returncode() == 0, output
        assert "Traceback" not in output, output
    finally:
        worker.stop()


def test_a_worker_stopped_past_its_lease_shuts_down_without_a_traceback(tmp_path, broker):
    """SIGSTOP the whole worker (main process, pool and embedded beat) for longer than its shard
    lease, then SIGCONT: its lease lapsed meanwhile, which is a normal case: one KEFU_ line,
    a warm shutdown, no traceback, and its supervisor restarts it."""
    lease_s = 4
    worker = _worker(tmp_path, broker, KEFU_SHARD_LEASE_S=str(lease_s)).start()
    try:
        _ready(worker)
        assert worker.proc is not None
        assert redis.Redis.from_url(broker).exists("kefu:shard:default:lease")
        os.killpg(worker.proc.pid, signal.SIGSTOP)
        lease = redis.Redis.from_url(broker)
        wait_for(lambda: not lease.exists("kefu:shard:default:lease"), 60, "the lease to lapse in Redis")
        os.killpg(worker.proc.pid, signal.SIGCONT)
        wait_for(lambda: not worker.running(), 90, "the worker to stop", worker.output)
        output = worker.output()
        assert "Traceback" not in output, output
        assert output.count("KEFU_SHARD_LEASE_LOST") == 1, output
    finally:
        worker.stop()
