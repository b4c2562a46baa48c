"""DingTalk HTTP-callback robots: `kefu dingtalk-callback` verifies and publishes, a real worker
(no Stream listener) ingests and answers through the fake OpenAPI."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.helpers import wait_for, wait_runs, worker_env
from transports.dingtalk.callback import callback_signature
from worker.celery_app import make_app
from worker.process import WorkerProcess

pytestmark = pytest.mark.parametrize("broker_url", ["redis"], indirect=True)

BIN = Path(sys.executable).parent


def robot_message(msg_id: str, sender: str, text: str) -> bytes:
    message = {
        "conversationId": f"cid-{sender}",
        "conversationType": "1",
        "msgId": msg_id,
        "msgtype": "text",
        "text": {"content": text},
        "createAt": int(time.time() * 1000),
        "senderStaffId": sender,
        "senderNick": sender,
    }
    return json.dumps(message, ensure_ascii=False).encode()


def signed(secret: str, at_ms: int | None = None) -> dict[str, str]:
    timestamp = str(at_ms or int(time.time() * 1000))
    return {"timestamp": timestamp, "sign": callback_signature(timestamp, secret), "Content-Type": "application/json"}


def test_signed_callbacks_are_answered_once_and_bad_ones_write_nothing(settings, store, ding, fake_dingtalk):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = worker_env(settings, KEFU_DINGTALK__OPENAPI_URL=fake_dingtalk.url, KEFU_DINGTALK__OAPI_URL=fake_dingtalk.url)
    worker = WorkerProcess(env, settings.data_dir / "worker.log").start()
    log = settings.data_dir / "callback.log"
    receiver = subprocess.Popen(
        [str(BIN / "kefu"), "dingtalk-callback", "--port", str(port)],
        env={**os.environ, **env},
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/dingtalk/{ding}"
    secret = fake_dingtalk.client_secret
    try:
        worker.wait_ready(make_app(settings))
        wait_for(lambda: "receiving DingTalk callbacks" in log.read_text(), 30, "the receiver to start")

        refused = [
            (url, signed("wrong secret"), robot_message("m-bad", "staff-x", "在吗"), 401),
            (url, signed(secret, int(time.time() * 1000) - 3_700_000), robot_message("m-old", "staff-x", "在吗"), 401),
            (url, signed(secret), b"{not json", 400),
            (url, signed(secret), json.dumps({"msgId": "m-x"}).encode(), 400),
            (f"http://127.0.0.1:{port}/dingtalk/nobody", signed(secret), robot_message("m-n", "staff-x", "在吗"), 404),
        ]
        for target, headers, body, status in refused:
            assert httpx.post(target, headers=headers, content=body).status_code == status

        genuine = robot_message("m-1", "staff-1", "可以开发票吗")
        for _ in range(2):  # DingTalk retries a callback it thinks failed
            answer = httpx.post(url, headers=signed(secret), content=genuine)
            assert answer.status_code == 200
        wait_for(lambda: len(fake_dingtalk.sends) == 1, 30, "the reply through the OpenAPI")
        wait_runs(worker.log_path)  # the retried callback's page and reconciler passes: no second reply
    finally:
        os.killpg(receiver.pid, signal.SIGTERM)
        receiver.wait(15)
        worker.stop()
    assert [s.user_ids for s in fake_dingtalk.sends] == [["staff-1"]]
    with store.read() as conn:
        assert conn.execute("SELECT platform_message_id FROM inbound_message").scalars().all() == ["m-1"]
    assert "可以开发票吗" not in log.read_text() and secret not in log.read_text()
