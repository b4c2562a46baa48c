"""The DingTalk callback receiver faces the internet: a hostile length, body, depth or pace
costs it a bounded answer, never memory, a thread or a traceback (issue 38, items 1 and 2).
A real uvicorn server on loopback, raw sockets for what an HTTP client would not send."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from runtime.accounts.credentials import save_credentials
from runtime.accounts.registry import AccountSpec, create_account
from tests.integration.helpers import wait_for
from transports.dingtalk import DingTalkCredentials
from transports.dingtalk.callback import callback_signature
from worker.callback_server import MAX_BODY, callback_app

SECRET = "s" * 32
published: list[object] = []


@pytest.fixture
def receiver(store) -> Iterator[str]:
    create_account(store, AccountSpec(id="ding", platform="dingtalk", identity="robot"))
    with store.write() as conn:
        credentials = DingTalkCredentials(client_id="c", client_secret=SECRET, robot_code="r")
        save_credentials(conn, "ding", credentials.storable())
    listening = socket.create_server(("127.0.0.1", 0))
    config = uvicorn.Config(callback_app(store, published.append), log_level="warning", limit_concurrency=1000)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 60, "the receiver to start")
    yield f"http://127.0.0.1:{listening.getsockname()[1]}"
    server.should_exit = True
    thread.join(10)


def signed() -> str:
    timestamp = str(int(time.time() * 1000))
    return f"timestamp: {timestamp}\r\nsign: {callback_signature(timestamp, SECRET)}\r\n"


def raw(base: str, request: bytes, timeout_s: float = 10) -> bytes:
    """What the receiver answers to bytes an HTTP client would not send."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
            if b"\r\n\r\n" in answer and any(end in answer for end in (b'"}', b"received.")):
                break
        return answer


@pytest.mark.parametrize(
    ("length", "status", "says"),
    [("Content-Length: -1", 400, b"Invalid HTTP request"), ("Content-Length: abc", 400, b"Invalid HTTP request"),
     (f"Content-Length: {200 * 1024 * 1024}", 413, b"DINGTALK_CALLBACK_TOO_LARGE"),
     ("Transfer-Encoding: chunked", 411, b"KEFU_LENGTH_REQUIRED")],
)  # fmt: skip
def test_a_hostile_length_is_refused_before_the_body_is_read(receiver, length, status, says):
    head = f"POST /dingtalk/ding HTTP/1.1\r\nHost: x\r\n{signed()}{length}\r\n\r\n".encode()
    answer = raw(receiver, head + b"[" * 1000)  # the body that follows is never read
    assert answer.startswith(f"HTTP/1.1 {status}".encode()) and says in answer
    assert httpx.get(f"{receiver}/healthz").status_code == 200


def test_a_body_nested_past_the_parsers_depth_is_malformed_not_a_crash(receiver):
    body = b"[" * 100_000 + b"]" * 100_000
    assert len(body) <= MAX_BODY
    headers = {"timestamp": (t := str(int(time.time() * 1000))), "sign": callback_signature(t, SECRET)}
    answer = httpx.post(f"{receiver}/dingtalk/ding", headers=headers, content=body)
    assert answer.status_code == 400 and answer.json() == {"code": "DINGTALK_CALLBACK_MALFORMED"}


def test_an_unsigned_request_is_refused_on_its_headers_with_its_body_unread(receiver):
    head = b"POST /dingtalk/ding HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n"
    answer = raw(receiver, head + b"x" * 10)  # 10 of the 1,000,000 bytes it declares: never waited for
    assert answer.startswith(b"HTTP/1.1 401") and b"DINGTALK_CALLBACK_UNSIGNED" in answer
    assert published == []


def test_three_hundred_slow_clients_hold_no_thread_and_healthz_answers(receiver):
    host, port = receiver.removeprefix("http://").split(":")
    slow = []
    try:
        for _ in range(300):  # half a request line each, then nothing
            conn = socket.create_connection((host, int(port)), timeout=10)
            conn.sendall(b"POST /dingtalk/ding HTTP/1.1\r\nHost: x\r\n")
            slow.append(conn)
        threads_before = threading.active_count()
        began = time.monotonic()
        assert httpx.get(f"{receiver}/healthz", timeout=5).status_code == 200
        assert time.monotonic() - began < 1.0
        assert threading.active_count() <= threads_before + 1  # asyncio: a socket each, no thread
    finally:
        for conn in slow:
            conn.close()


def test_a_signed_callback_is_received(receiver):
    message = {
        "conversationId": "cid", "conversationType": "1", "msgId": "m-1", "msgtype": "text",
        "text": {"content": "在吗"}, "createAt": int(time.time() * 1000), "senderStaffId": "staff-1",
    }  # fmt: skip
    headers = {"timestamp": (t := str(int(time.time() * 1000))), "sign": callback_signature(t, SECRET)}
    before = len(published)
    answer = httpx.post(f"{receiver}/dingtalk/ding", headers=headers, content=json.dumps(message).encode())
    assert answer.status_code == 200 and len(published) == before + 1


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 1e6


@pytest.mark.parametrize("declared", [MAX_BODY, 200 * 1024 * 1024])
def test_a_200_mb_body_costs_the_receiver_no_memory(receiver, declared):
    host, port = receiver.removeprefix("http://").split(":")
    chunk = b"x" * (1 << 20)
    before = _rss_mb()
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        head = f"POST /dingtalk/ding HTTP/1.1\r\nHost: x\r\n{signed()}Content-Length: {declared}\r\n\r\n"
        conn.sendall(head.encode())
        try:
            for _ in range(200):  # 200 MB, whatever was declared
                conn.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the receiver answered and closed: the rest was never read
    assert httpx.get(f"{receiver}/healthz", timeout=5).status_code == 200
    assert _rss_mb() - before < 20
