"""Flower, run as the README runs it, shows the pipeline (issue 43): each buyer message's task
lists the steps it ran inline under their own task names, a reply that was not delivered fails
its task, every task is named and routed, beat's housekeeping stays out of the task list, and
the API asks for the user and password of FLOWER_BASIC_AUTH."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.helpers import wait_for, worker_env
from worker.celery_app import make_app

BIN = Path(sys.executable).parent
AUTH = ("ops", "s3cret-flower")
HOUSEKEEPING = ("kefu.receipts.alerts", "kefu.ingest.reconcile", "kefu.placement.directory", "kefu.placement.drive")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KEFU_", "FLOWER_"))}
    return subprocess.Popen(
        args, env={**base, **env}, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class Flower:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str, auth: tuple[str, str] | None = AUTH) -> httpx.Response:
        return httpx.get(f"{self.base}{path}", auth=auth, timeout=10)

    def tasks(self) -> dict[str, dict[str, Any]]:
        return dict(self.get("/api/tasks").json())

    def worker_alive(self, node: str) -> bool:
        try:
            return bool(self.get("/api/workers?status=1").json().get(node))
        except httpx.HTTPError:
            return False


def _worker(settings: Any, node: str, log: Path, **extra: str) -> subprocess.Popen[bytes]:
    env = worker_env(settings, KEFU_ALERTS__INTERVAL_S="1", KEFU_LANGUAGE="en", **extra)
    argv = [str(BIN / "celery"), "-A", "worker", "worker", "-P", "solo", "-B", "-l", "info", "-n", node]
    return _spawn(argv, env, log)


def _task(flower: Flower, state: str, name: str) -> dict[str, Any] | None:
    found = [t for t in flower.tasks().values() if t.get("name") == name and t.get("state") == state]
    return found[0] if found else None


@pytest.mark.parametrize("broker_url", ["redis"], indirect=True)
def test_flower_shows_each_message_s_steps_a_failed_send_and_no_housekeeping(
    settings, store, shop, platform, transport, tmp_path
):
    port = _free_port()
    flower_env = {"KEFU_DATA_DIR": str(settings.data_dir), "KEFU_BROKER_URL": settings.broker_url}
    flower_env["FLOWER_BASIC_AUTH"] = ":".join(AUTH)
    argv = [str(BIN / "celery"), "-A", "worker", "flower", f"--port={port}", "--address=127.0.0.1"]
    flower_proc = _spawn(argv, flower_env, tmp_path / "flower.log")
    flower = Flower(port)
    app = make_app(settings)
    worker = _worker(settings, "sends@flowertest", tmp_path / "w1.log")
    try:
        wait_for(lambda: flower.worker_alive("sends@flowertest"), 90, "Flower to see the worker's events")
        assert flower.get("/api/tasks", auth=None).status_code == 401
        assert flower.get("/api/tasks", auth=("ops", "wrong")).status_code == 401

        # A buyer message with the rules agent: one ingest task, the rest of its way inline.
        page = transport.page_of(shop, [platform.buyer_says(shop, "b1", "买家b1", "什么时候发货？")])
        app.send_task("kefu.ingest.page", args=[page.model_dump(mode="json")])
        wait_for(lambda: _task(flower, "SUCCESS", "kefu.ingest.page"), 60, "the page's task to succeed")
        ingested = _task(flower, "SUCCESS", "kefu.ingest.page")
        assert ingested is not None
        assert ingested["routing_key"] == "kefu.ingest.default"  # published to the default exchange, by queue name
        result = str(ingested["result"])
        # (admission ran in the page's own transaction: runtime.pipeline.ingest)
        assert "'kefu.agent.run_turn customer 1: complete', 'kefu.outbox.attempt auto-" in result, result
        assert result.endswith(": sent']}"), result

        # A task that expired in its queue is revoked before it is received: still named.
        app.send_task("kefu.agent.admit", args=[0], expires=datetime.now(UTC) - timedelta(seconds=5))
        wait_for(lambda: _task(flower, "REVOKED", "kefu.agent.admit"), 60, "the expired task, named, revoked")

        # Housekeeping ran (the worker's own counts) and is not in the task list.
        def housekeeping_ran() -> bool:
            workers = flower.get("/api/workers?refresh=1").json()
            totals = workers.get("sends@flowertest", {}).get("stats", {}).get("total", {})
            return all(totals.get(name, 0) > 0 for name in ("kefu.receipts.alerts", "kefu.ingest.reconcile"))

        wait_for(housekeeping_ran, 60, "beat's alerts and reconciler to run")
        # One that fails is listed, failed (here: called with arguments it does not take).
        app.send_task("kefu.receipts.alerts", args=["unexpected"])
        wait_for(lambda: _task(flower, "FAILURE", "kefu.receipts.alerts"), 60, "the failed housekeeping task")
        _stop(worker)

        # A reply whose send times out after reaching the platform: its outcome is unknown.
        worker = _worker(
            settings, "fails@flowertest", tmp_path / "w2.log", KEFU_SIMULATOR__SEND_TIMEOUTS="after-submit"
        )
        wait_for(lambda: flower.worker_alive("fails@flowertest"), 90, "Flower to see the second worker")
        page = transport.page_of(shop, [platform.buyer_says(shop, "b2", "买家b2", "什么时候发货？")])
        app.send_task("kefu.ingest.page", args=[page.model_dump(mode="json")])
        wait_for(lambda: _task(flower, "FAILURE", "kefu.ingest.page"), 60, "the page's task to fail")
        failed = _task(flower, "FAILURE", "kefu.ingest.page")
        assert failed is not None
        assert "SendNotDelivered" in failed["exception"] and "result-unknown" in failed["exception"], failed
        assert "kefu.outbox.attempt" in failed["exception"], failed
        # The receipt query the unknown outcome calls for is a task of its own.
        wait_for(lambda: _task(flower, "SUCCESS", "kefu.outbox.settle"), 60, "the receipt query")

        tasks = flower.tasks()
        assert all(task.get("name") for task in tasks.values()), tasks
        assert all(task.get("routing_key") for task in tasks.values() if task["state"] != "REVOKED"), tasks
        listed = [(t["name"], t["state"]) for t in tasks.values() if t["name"] in HOUSEKEEPING]
        assert listed == [("kefu.receipts.alerts", "FAILURE")], listed
        # Expected, so logged in one line, not as an error with a traceback.
        log = (tmp_path / "w2.log").read_text(errors="replace")
        assert "SendNotDelivered" in log and "Traceback" not in log, log
    finally:
        _stop(worker)
        _stop(flower_proc)
