"""End-to-end latency and throughput: page published -> reply recorded by the simulator.

A real `celery -A worker worker` on Redis with the rules agent. Each offered message comes from
a distinct buyer (no batching), published at a fixed rate. Latency is measured from publish
to the simulated platform's receipt of the reply. The baseline, measured in the same run
against the same worker, is the round trip of a no-op Celery task (`kefu.ingest.ping`).

    python -m bench.e2e [--redis redis://127.0.0.1:6379/13] [--rate 20] [--seconds 10] [--concurrency 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import redis
from rich.console import Console
from rich.table import Table

from config import load_settings
from runtime.accounts import AccountSpec, create_account
from runtime.routes import RouteSpec, create_route
from runtime.store import DeliveryStore
from transports.simulator import SimulatedPlatform, SimulatorTransport
from worker.celery_app import make_app
from worker.dispatch import receive_page
from worker.process import WorkerProcess
from worker.tasks import pipeline as tasks

ACCOUNT = "bench-shop"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Rig:
    def __init__(self, data_dir: Path, broker: str, concurrency: int) -> None:
        redis.Redis.from_url(broker).flushdb()
        self.settings = load_settings(data_dir=data_dir, broker_url=broker)
        store = DeliveryStore(self.settings.delivery_path)
        create_account(store, AccountSpec(id=ACCOUNT, platform="simulator", identity="bench"))
        create_route(store, RouteSpec(id="all", account_id=ACCOUNT, conversation_type="direct"), op_id="bench-route")
        self.platform = SimulatedPlatform(self.settings.simulator_path)
        self.transport = SimulatorTransport(self.platform)
        self.app = make_app(self.settings)
        env = {"KEFU_DATA_DIR": str(data_dir), "KEFU_BROKER_URL": broker}
        self.worker = WorkerProcess(env, data_dir / "worker.log", beat=False, concurrency=concurrency)
        self.buyers = 0

    def noop_round_trips(self, count: int) -> list[float]:
        ping = self.app.tasks[tasks.ping.name]
        times = []
        for _ in range(count):
            began = time.perf_counter()
            assert ping.delay().get(timeout=10) == "pong"
            times.append((time.perf_counter() - began) * 1000)
        return times

    def offer(self, rate: float, seconds: float, drain_s: float = 15) -> tuple[list[float], int, float]:
        """Publish at `rate`/s for `seconds`; return (latencies ms, unanswered, last reply time after start)."""
        sent: dict[str, float] = {}
        after = max((s.id for s in self.platform.received(ACCOUNT)), default=0)
        start = time.time()
        total = int(rate * seconds)
        for i in range(total):
            target = start + i / rate
            if (delay := target - time.time()) > 0:
                time.sleep(delay)
            self.buyers += 1
            buyer = f"buyer{self.buyers}"
            message = self.platform.buyer_says(ACCOUNT, buyer, buyer, "请问什么时候发货？")
            sent[buyer] = time.time()
            receive_page(self.app, self.transport.page_of(ACCOUNT, [message]))
        deadline = time.time() + drain_s
        while time.time() < deadline:
            replies = [s for s in self.platform.received(ACCOUNT, after_id=after) if s.recipient_id in sent]
            if len(replies) >= total:
                break
            time.sleep(0.05)
        latencies = [(r.received_at / 1000 - sent[r.recipient_id]) * 1000 for r in replies]
        last = max((r.received_at / 1000 for r in replies), default=start) - start
        return latencies, total - len(replies), last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--rate", type=float, default=20, help="fixed offered rate for the latency run (messages/s)")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        rig = Rig(Path(tmp), args.redis, args.concurrency)
        rig.worker.start()
        try:
            rig.worker.wait_ready(rig.app)
            rig.noop_round_trips(20)  # warm-up
            noop = rig.noop_round_trips(200)
            rig.offer(5, 2)  # warm-up
            latencies, lost, _ = rig.offer(args.rate, args.seconds)
            table = Table(
                "measure", "p50 ms", "p99 ms", "n", title=f"e2e on Redis, {args.concurrency} worker processes"
            )
            table.add_row(
                "no-op Celery task round trip (baseline)",
                f"{percentile(noop, 0.5):.1f}",
                f"{percentile(noop, 0.99):.1f}",
                str(len(noop)),
            )
            table.add_row(
                f"page -> reply at {args.rate:g} msg/s",
                f"{percentile(latencies, 0.5):.1f}",
                f"{percentile(latencies, 0.99):.1f}",
                str(len(latencies)),
            )
            console.print(table)
            print(f"unanswered at {args.rate:g} msg/s: {lost}")
            print(f"ratio e2e p50 / no-op p50: {percentile(latencies, 0.5) / percentile(noop, 0.5):.1f}x")
            sustained = 0.0
            rates = Table(
                "offered msg/s",
                "p50 ms",
                "p99 ms",
                "unanswered",
                "drained in s",
                "sustained",
                title="step-up (5 s per step)",
            )
            for rate in (10, 20, 30, 40, 50, 60, 70, 80, 100, 120, 160, 240, 320):
                lat, missing, last = rig.offer(rate, 5)
                ok = missing == 0 and last <= 5 + 1.0  # kept up: done within 1 s of the last offer
                rates.add_row(
                    str(rate),
                    f"{percentile(lat, 0.5):.0f}" if lat else "-",
                    f"{percentile(lat, 0.99):.0f}" if lat else "-",
                    str(missing),
                    f"{last:.1f}",
                    "yes" if ok else "no",
                )
                if not ok:
                    break
                sustained = rate
                time.sleep(1)
            console.print(rates)
            print(f"highest sustained rate: {sustained:g} msg/s")
        finally:
            rig.worker.stop()


if __name__ == "__main__":
    main()
