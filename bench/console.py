"""Console page load time on a full store: 10,000 customers and 100,000 messages by default.

The store is filled through the ingest path (pages of 100 messages), with an outbox reply for
one message in ten; then the console app (worker.console) is served by uvicorn on loopback
and each page is fetched over HTTP, signed in, several times: the first page of the list, a
page deep in the list (by cursor), a literal search, one conversation, and its live stream's
first event. The baseline in the same run is the console's `/healthz` (the HTTP and app
overhead with no store read).

    python -m bench.console [--customers 10000] [--messages 100000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import uvicorn
from rich.console import Console
from rich.table import Table

from bench.growth import ACCOUNT
from config import load_settings
from runtime import pipeline
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.routes import RouteSpec, create_route
from runtime.operators.accounts import Role, add_operator
from runtime.outbox.manual import ManualSend, send_manual_parts
from transports.simulator import SimulatedPlatform, SimulatorTransport
from worker.console import create_app
from worker.context import WorkerRuntime

PASSWORD = "bench-password"


def fill(runtime: WorkerRuntime, customers: int, messages: int) -> None:
    platform = SimulatedPlatform(runtime.settings.simulator_path)
    transport = SimulatorTransport(platform)
    for start in range(0, messages, 100):
        said = [
            platform.buyer_says(ACCOUNT, f"b{(start + i) % customers}", f"买家{(start + i) % customers}", "在吗？")
            for i in range(100)
        ]
        pipeline.ingest(runtime, transport.page_of(ACCOUNT, said).model_dump(mode="json"))
    replies = [
        ManualSend(request_id=f"r{c}", customer_id=c, text="在的，请问有什么可以帮您？")
        for c in range(1, customers + 1, 10)
    ]
    send_manual_parts(runtime.store, replies)


def serve(runtime: WorkerRuntime) -> tuple[uvicorn.Server, threading.Thread, str]:
    config = uvicorn.Config(create_app(runtime), host="127.0.0.1", port=0, log_level="warning")
    config.timeout_graceful_shutdown = 1
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    return server, thread, f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"


def timed(fetch: Callable[[], object], repeat: int) -> list[float]:
    response = fetch()  # warm: templates compiled, connections open
    if isinstance(response, httpx.Response):
        response.raise_for_status()
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        fetch()
        times.append((time.perf_counter() - began) * 1000)
    return times


def first_event(client: httpx.Client, path: str) -> None:
    with client.stream("GET", path) as stream:
        for line in stream.iter_lines():
            if line.startswith("data:"):
                return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--customers", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        runtime = WorkerRuntime(load_settings(data_dir=Path(tmp)))
        create_account(runtime.store, AccountSpec(id=ACCOUNT, platform="simulator", identity="bench"))
        create_route(runtime.store, RouteSpec(id="all", account_id=ACCOUNT, conversation_type="direct"), op_id="r")
        began = time.perf_counter()
        fill(runtime, args.customers, args.messages)
        console.print(
            f"filled: {args.customers:,} customers, {args.messages:,} messages in {time.perf_counter() - began:.0f} s"
        )
        add_operator(runtime.store, "bench", Role.OPERATOR, PASSWORD)
        server, thread, base = serve(runtime)
        try:
            with httpx.Client(base_url=base, follow_redirects=True, timeout=30) as client:
                token = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text)[1]  # type: ignore[index]
                client.post("/login", data={"csrf": token, "name": "bench", "password": PASSWORD})
                deep = client.get("/?source=simulation")
                depth = min(20, args.customers // 50 - 1)  # pages of 50 in: a cursor up to 1,000 rows deep
                for _ in range(depth):
                    deep = client.get(re.search(r'id="older" href="([^"]+)"', deep.text)[1].replace("&amp;", "&"))  # type: ignore[index]
                deep_url = str(deep.url)
                pages: dict[str, Callable[[], object]] = {
                    "/healthz (baseline)": lambda: client.get("/healthz"),
                    "list, first page (50 rows)": lambda: client.get("/?source=simulation"),
                    f"list, {depth * 50:,} rows deep": lambda: client.get(deep_url),
                    "list, literal search": lambda: client.get("/?source=simulation&q=买家1234"),
                    "conversation": lambda: client.get("/c/1"),
                    "live stream, first event": lambda: first_event(client, "/c/1/events"),
                }
                results = {name: timed(fetch, args.repeat) for name, fetch in pages.items()}
        finally:
            server.should_exit = True
            thread.join(10)
    baseline = statistics.median(results["/healthz (baseline)"])
    table = Table("page", "p50 ms", "max ms", "p50 / baseline", title=f"console pages, {args.repeat} fetches each")
    for name, times in results.items():
        median = statistics.median(times)
        table.add_row(name, f"{median:.1f}", f"{max(times):.1f}", f"{median / baseline:.1f}x")
    console.print(table)


if __name__ == "__main__":
    main()
