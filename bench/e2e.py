"""End-to-end latency and throughput: page published -> reply recorded by the simulator.

A real `celery -A worker worker` on Redis with the rules agent. Each offered message comes from
a distinct buyer (no batching), published at a fixed rate. Latency is measured from publish
to the simulated platform's receipt of the reply. The baseline, measured in the same run
against the same worker, is the round trip of a no-op Celery task (`kefu.ingest.ping`).

    python -m bench.e2e [--redis redis://127.0.0.1:6379/13] [--rate 20] [--seconds 10] [--concurrency 2]
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import redis
from rich.console import Console
from rich.table import Table

from config import load_settings
from runtime.accounts import AccountSpec, create_account
from runtime.routes import RouteSpec, create_route
from runtime.store import DeliveryStore
from transports.simulator import SimulatedPlatform, SimulatorTransport
from transports.simulator.platform import ReceivedSend
from worker.celery_app import make_app
from worker.dispatch import receive_page
from worker.process import WorkerProcess
from worker.tasks import pipeline as tasks

ACCOUNT = "bench-shop"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Rig:
    """One shard's worker set and its accounts. Several rigs can share a Redis (`flush=False`
    for all but the first) and a simulated platform file (`platform_path`)."""

    def __init__(
        self,
        data_dir: Path,
        broker: str,
        concurrency: int,
        shard: str = "default",
        accounts: Sequence[str] = (ACCOUNT,),
        platform_path: Path | None = None,
        flush: bool = True,
    ) -> None:
        if flush:
            redis.Redis.from_url(broker).flushdb()
        simulator = {"platform_path": platform_path} if platform_path else {}
        self.settings = load_settings(data_dir=data_dir, broker_url=broker, shard=shard, simulator=simulator)
        self.accounts = list(accounts)
        store = DeliveryStore(self.settings.delivery_path)
        for account in self.accounts:
            create_account(store, AccountSpec(id=account, platform="simulator", identity=f"{account}-seller"))
            create_route(
                store,
                RouteSpec(id=f"{account}-all", account_id=account, conversation_type="direct"),
                op_id=f"{account}-route",
            )
        store.close()  # the worker's and this process's runtime open their own
        self.platform = SimulatedPlatform(self.settings.simulator_path)
        self.transport = SimulatorTransport(self.platform)
        self.app = make_app(self.settings)
        env = {"KEFU_DATA_DIR": str(data_dir), "KEFU_BROKER_URL": broker}
        if shard != "default":
            env["KEFU_SHARD"] = shard
        if platform_path:
            env["KEFU_SIMULATOR__PLATFORM_PATH"] = str(platform_path)
        self.worker = WorkerProcess(env, data_dir / "worker.log", beat=False, concurrency=concurrency)

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
        return offer([(self, account) for account in self.accounts], rate, seconds, drain_s)


_buyers = itertools.count(1)  # buyer names are never reused within a process


def offer(
    lanes: Sequence[tuple[Rig, str]], rate: float, seconds: float, drain_s: float = 15
) -> tuple[list[float], int, float]:
    """Publish at `rate`/s for `seconds`, each message from a new buyer, round robin over the
    lanes (an account, and the rig whose shard serves it; every rig on one simulated platform);
    return (latencies ms, unanswered, last reply time after start)."""
    platform = lanes[0][0].platform
    sent: dict[tuple[str, str], float] = {}
    after = max((s.id for s in platform.received()), default=0)
    start = time.time()
    total = int(rate * seconds)
    for i in range(total):
        target = start + i / rate
        if (delay := target - time.time()) > 0:
            time.sleep(delay)
        rig, account = lanes[i % len(lanes)]
        buyer = f"buyer{next(_buyers)}"
        message = rig.platform.buyer_says(account, buyer, buyer, "请问什么时候发货？")
        sent[(account, buyer)] = time.time()
        receive_page(rig.app, rig.transport.page_of(account, [message]))
    deadline = time.time() + drain_s
    replies: list[ReceivedSend] = []
    while time.time() < deadline:
        replies = [s for s in platform.received(after_id=after) if (s.account_id, s.recipient_id) in sent]
        if len(replies) >= total:
            break
        time.sleep(0.05)
    latencies = [(r.received_at / 1000 - sent[(r.account_id, r.recipient_id or "")]) * 1000 for r in replies]
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
