"""A fake OpenAI-compatible Chat Completions server: real HTTP on loopback, scripted replies.

Scripted steps are served in order; when the script is empty, a default policy answers like a
minimal shop agent: one `im_send_message` echoing the last buyer line, then a closing text.
Run standalone for the demo: `python -m tests.fakes.openai_server --port 8765`; with
`--latency 2 --jitter 0.2` every default answer takes 2 s ± 0.2 s, like a network model
(`bench.model_load`). Connections are kept alive (HTTP/1.1), as a real endpoint's are.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_LINE = re.compile(r"\[counterpart[^\]]*\] (?P<text>.*)$")


@dataclass
class Step:
    status: int = 200
    body: dict[str, Any] | None = None
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


def completion(content: str | None = None, tool_calls: list[tuple[str, str, str]] | None = None) -> dict[str, Any]:
    """A Chat Completions response body; tool_calls are (id, name, raw arguments)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in tool_calls
        ]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "fake",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }


def text_of(message: dict[str, Any]) -> str:
    """A message's text: its content, or the text parts of a content list (a vision request)."""
    content = message.get("content") or ""
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text", "") for part in content if part.get("type") == "text")


def images_of(message: dict[str, Any]) -> list[str]:
    """The image URLs (data URLs) of a message's content list."""
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [part["image_url"]["url"] for part in content if part.get("type") == "image_url"]


def default_policy(request: dict[str, Any]) -> dict[str, Any]:
    """Reply once to the latest buyer lines; after a tool result since the last user message, stop.
    Like a model that reads its context, it does not answer buyer lines again that a reply it
    sent already follows (a turn a crash cut short, then asked to check its tools); a send whose
    outcome a repair marked unknown or not started is one it makes again."""
    messages = request["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    if any(m["role"] == "tool" for m in messages[last_user:]):
        return completion("已回复顾客。")
    buyer: list[str] = []
    for index in range(last_user, -1, -1):
        message = messages[index]
        if message["role"] == "user":
            buyer = [m.group("text") for line in text_of(message).splitlines() if (m := _LINE.search(line))]
            if buyer:
                break
    if not buyer:
        return completion("没有需要回复的顾客消息。")
    if _sent_after(messages[index + 1 :]):
        return completion("已回复顾客。")
    text = json.dumps({"text": "您好，已收到您的消息：" + "；".join(buyer)}, ensure_ascii=False)
    return completion(None, [(f"call-{len(messages)}", "im_send_message", text)])


def _sent_after(messages: list[dict[str, Any]]) -> bool:
    """An im_send_message call among `messages` whose result says it went (not a repair's)."""
    sends = {
        call["id"]
        for message in messages
        for call in message.get("tool_calls") or []
        if call["function"]["name"] == "im_send_message"
    }
    repaired = ("TOOL_OUTCOME_UNKNOWN", "TOOL_NOT_STARTED", "Error")
    return any(
        m["role"] == "tool" and m.get("tool_call_id") in sends and not any(r in text_of(m) for r in repaired)
        for m in messages
    )


@dataclass
class FakeOpenAI:
    host: str = "127.0.0.1"
    port: int = 0
    script: deque[Step] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    policy: Callable[[dict[str, Any]], dict[str, Any]] = default_policy  # answers when the script is empty
    latency_s: float = 0.0  # each policy answer's delay: latency_s ± jitter_s (uniform)
    jitter_s: float = 0.0
    record: bool = True  # keep every request's body and headers (`requests`, `headers`)
    in_flight: int = 0  # calls being answered now, and the most at once
    peak_in_flight: int = 0

    def __post_init__(self) -> None:
        fake = self
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the openai client expects of a real endpoint
            disable_nagle_algorithm = True  # headers and body go out at once, not 40 ms apart

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    if fake.record:
                        fake.requests.append(body)
                        fake.headers.append(dict(self.headers))
                    fake.in_flight += 1
                    fake.peak_in_flight = max(fake.peak_in_flight, fake.in_flight)
                    scripted = fake.script.popleft() if fake.script else None
                try:
                    step = scripted or Step(body=fake.policy(body), delay_s=fake.delay())
                    time.sleep(step.delay_s)
                finally:
                    with lock:
                        fake.in_flight -= 1
                payload = json.dumps(step.body or {"error": {"message": "scripted failure"}}).encode()
                self.send_response(step.status)
                for name, value in step.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                try:
                    self.wfile.write(payload)
                except ConnectionError:  # the client timed out and left
                    pass

            def do_GET(self) -> None:  # noqa: N802 - `/stats`: calls in flight now and at most (benchmarks)
                payload = json.dumps({"in_flight": fake.in_flight, "peak_in_flight": fake.peak_in_flight}).encode()
                self.send_response(200 if self.path == "/stats" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 1024  # hundreds of turns connect at once (the default backlog is 5)

            def handle_error(self, request: Any, client_address: Any) -> None:
                if not isinstance(sys.exc_info()[1], ConnectionError):  # not a client that went away (killed)
                    super().handle_error(request, client_address)

        self.server = Server((self.host, self.port), Handler)
        self.port = self.server.server_address[1]

    def delay(self) -> float:
        return max(0.0, self.latency_s + random.uniform(-self.jitter_s, self.jitter_s))

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def __enter__(self) -> FakeOpenAI:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds each answer takes")
    parser.add_argument("--jitter", type=float, default=0.0, help="± seconds, uniform")
    args = parser.parse_args()
    with FakeOpenAI(port=args.port, latency_s=args.latency, jitter_s=args.jitter, record=False) as fake:
        print(f"fake OpenAI-compatible server at {fake.base_url}", flush=True)
        threading.Event().wait()
