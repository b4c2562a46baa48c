"""A header never moves the sign-in throttle: `kefu console` takes the client's address from
its socket unless KEFU_CONSOLE__TRUSTED_PROXIES names the proxy (issue 38, item 10)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from runtime.operators.accounts import Role, add_operator
from tests.integration.helpers import wait_for

BIN = Path(sys.executable).parent


def test_x_forwarded_for_from_loopback_does_not_reset_the_sign_in_throttle(settings, store):
    add_operator(store, "olga", Role.OPERATOR, "operator-pass-1")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "KEFU_DATA_DIR": str(settings.data_dir)}
    log = settings.data_dir / "console.log"
    console = subprocess.Popen(
        [str(BIN / "kefu"), "console", "--port", str(port)], env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}"

    def serving() -> bool:
        try:
            return httpx.get(f"{base}/healthz").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(serving, 60, "the console to serve", log.read_text)
        statuses = []
        with httpx.Client(base_url=base) as client:
            for n in range(7):  # a guesser claiming a new address each time
                token = client.get("/login").text.split('name="csrf" value="')[1].split('"')[0]
                headers = {"X-Forwarded-For": f"203.0.113.{n}"}
                data = {"csrf": token, "name": "olga", "password": f"guess-{n}"}
                statuses.append(client.post("/login", data=data, headers=headers).status_code)
    finally:
        console.terminate()
        console.wait(15)
    assert statuses[5:] == [429, 429]  # the sixth guess from the same socket address waits
