"""Listeners for real: a worker started with `--listen`, and a `kefu listen` process, each
against Redis and the simulated platform. Catch-up is switched off (a long grace), so every
message answered here came through a listener."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.accounts.registry import load_account, set_connection_intent
from runtime.inbound.checkpoints import checkpoint_views
from tests.integration.helpers import wait_all_answered, wait_for, wait_runs, worker_env
from worker.audit import audit
from worker.celery_app import make_app
from worker.process import WorkerProcess

pytestmark = pytest.mark.parametrize("broker_url", ["redis"], indirect=True)

BIN = Path(sys.executable).parent


def _env(settings) -> dict[str, str]:
    # No catch-up: only listeners bring messages in. English: the words `kefu accounts pause` is asserted by.
    return worker_env(settings, KEFU_RECONCILE__GRACE_S="600", KEFU_LANGUAGE="en")


def _listener_state(store, account: str) -> str:
    with store.read() as conn:
        return load_account(conn, account).listener_state


def _inbound(store) -> int:
    with store.read() as conn:
        return conn.execute("SELECT count(*) FROM inbound_message").scalar_one()


def test_a_worker_started_with_listen_answers_follows_disconnects_and_stops_cleanly(settings, store, shop, platform):
    app = make_app(settings)
    worker = WorkerProcess(_env(settings), settings.data_dir / "worker.log", listen=True).start()
    try:
        worker.wait_ready(app)
        for buyer, text in [("b1", "在吗"), ("b2", "什么时候发货"), ("b1", "可以退货吗")]:
            platform.buyer_says(shop, buyer, f"买家{buyer}", text)
        wait_all_answered(store, platform, shop)
        assert _listener_state(store, shop) == "running"
        assert checkpoint_views(store, shop)[0].report.reception == "running"

        set_connection_intent(store, shop, "disconnected")
        wait_for(lambda: _listener_state(store, shop) == "stopped", 10, "the listener to stop")
        before = _inbound(store)
        platform.buyer_says(shop, "b3", "买家b3", "有优惠吗")
        wait_runs(worker.log_path)  # supervision passes, polls, reconciler passes: a closed listener takes nothing in
        assert _inbound(store) == before

        set_connection_intent(store, shop, "connected")
        result = wait_all_answered(store, platform, shop)  # resumed from the committed cursor
        assert (result.buyer_messages, result.answered, result.duplicate_replies, result.lost) == (4, 4, 0, 0)
    finally:
        worker.stop()
    assert worker.proc.returncode == 0
    assert _listener_state(store, shop) == "stopped"  # shutdown closed it and said so


def test_kefu_listen_runs_listeners_for_a_worker_and_kefu_accounts_pause_stops_one(settings, store, shop, platform):
    app = make_app(settings)
    env = {**os.environ, **_env(settings)}
    worker = WorkerProcess(_env(settings), settings.data_dir / "worker.log").start()
    log = settings.data_dir / "listen.log"
    listen = subprocess.Popen(
        [str(BIN / "kefu"), "listen"],
        env={**env, "COLUMNS": "200"},
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        worker.wait_ready(app)
        platform.buyer_says(shop, "b1", "买家b1", "在吗")
        wait_all_answered(store, platform, shop)

        done = subprocess.run(
            [str(BIN / "kefu"), "accounts", "pause", shop], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0 and f"account {shop}: disconnected" in done.stdout
        wait_for(lambda: _listener_state(store, shop) == "stopped", 10, "the listener to stop")
        status = subprocess.run(
            [str(BIN / "kefu"), "status", "--source", "simulation"],
            env={**env, "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert status.returncode == 0
        row = next(line for line in status.stdout.splitlines() if line.startswith(f"│ {shop} "))
        assert "stopped" in row  # reception and listener
    finally:
        if listen.poll() is None:
            os.killpg(listen.pid, signal.SIGTERM)
        code = listen.wait(15)
        worker.stop()
    printed = log.read_text()
    assert code == 0, printed
    assert f"listener {shop}: running" in printed and f"listener {shop}: stopped" in printed
    assert printed.rstrip().endswith("listeners stopped")
    assert audit(store, platform, shop).duplicate_replies == 0
