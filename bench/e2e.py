"""End-to-end latency, throughput and worker CPU: page published -> reply recorded by the
simulator, beside a no-op chain of the same shape, measured in the same run on the same workers.

A real `celery -A worker worker` on Redis with the rules agent (beat off). Each offered
message comes from a distinct buyer (no batching), published at a fixed rate; its latency runs
from publish to the simulated platform's receipt of the reply. Two baselines:

- the round trip of a no-op Celery task (`kefu.ingest.ping`);
- the probe chain (worker.tasks.probe): four no-op tasks on kefu's four pipeline queues,
  ingest -> agent -> outbox -> receipts, each publishing the next. Its latency runs from
  publish to the time the last hop ran, which it keeps as its result under an id the bench
  picked; the bench collects the results once it has published everything.

Printed: latency at `--rate` for `--seconds`, with the workers' CPU per message (utime + stime
of each worker's whole process tree, from /proc, before and after the run) and the Redis
commands per message (INFO commandstats: the whole server's, so give the bench a Redis nothing
else uses); then a step-up
through the same offered rates for the chain and for kefu (5 s per step). A rate is sustained
when every message was answered, p99 <= 150 ms, and the last answer came within 1 s of the last
offer; a step that misses is measured once more, and the second measurement counts. Last, the
ratios kefu / chain of CPU per message and of the highest sustained rate.

`--pool prefork` runs one worker with `--concurrency` pool processes; `--pool solo` runs
`--concurrency` solo workers side by side, each consuming every queue of the shard (one
instance: they join one grant of the shard's lease, worker.shard_lease).

    python -m bench.e2e [--redis redis://127.0.0.1:6379/13] [--rate 20] [--seconds 10]
                        [--concurrency 2] [--pool prefork|solo]
"""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from rich.console import Console
from rich.table import Table

from config import load_settings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.routes import RouteSpec, create_route
from runtime.operators.status import is_quiet
from runtime.store import DeliveryStore
from transports.simulator import SimulatedPlatform, SimulatorTransport
from transports.simulator.platform import ReceivedSend
from worker.celery_app import FAMILIES, make_app, queue_name
from worker.context import runtime_for
from worker.dispatch import receive_page
from worker.process import WorkerProcess, _child_pids
from worker.tasks import pipeline as tasks
from worker.tasks import probe

ACCOUNT = "bench-shop"
P99_BOUND_MS = 150.0
DRAIN_BOUND_S = 1.0  # the last answer within this of the last offer: the workers kept up
STEP_S = 5.0
STEP_RATES = (10, 20, 30, 40, 50, 60, 70, 80, 100, 120, 140, 160, 200, 240, 320)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Run:
    """One offered load and what came back of it."""

    offered: int
    latencies: list[float]  # ms, publish -> answer, of the answered ones
    last_offer_s: float  # after the first offer
    last_answer_s: float  # after the first offer (0 with none answered)

    @property
    def unanswered(self) -> int:
        return self.offered - len(self.latencies)

    @property
    def drained_s(self) -> float:
        """From the last offer to the last answer."""
        return self.last_answer_s - self.last_offer_s

    def p(self, q: float) -> float | None:
        return percentile(self.latencies, q) if self.latencies else None

    @property
    def sustained(self) -> bool:
        p99 = self.p(0.99)
        return self.unanswered == 0 and p99 is not None and p99 <= P99_BOUND_MS and self.drained_s <= DRAIN_BOUND_S


def _paced(rate: float, seconds: float) -> Iterator[int]:
    """0, 1, … `rate * seconds` - 1, each yielded at its time on a fixed schedule from now."""
    start = time.time()
    for i in range(int(rate * seconds)):
        if (delay := start + i / rate - time.time()) > 0:
            time.sleep(delay)
        yield i


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process and its descendants, living and reaped
    (/proc/<pid>/stat utime, stime, cutime, cstime); 0 for a process that is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    ticks = sum(int(f) for f in fields[11:15])  # fields 14-17 of proc(5), counted from 1
    return ticks / CLOCK_TICKS + sum(_tree_cpu_s(child) for child in _child_pids(pid))


class Workers:
    """The worker processes of a rig: one prefork worker of `concurrency` pool processes,
    `concurrency` solo workers side by side on the same data dir and broker, one worker on a
    thread pool of `concurrency` threads, or one worker on the pool kefu picks for its settings
    ("default", worker.celery_app.pool_defaults)."""

    def __init__(self, env: dict[str, str], data_dir: Path, concurrency: int, pool: str = "prefork") -> None:
        log = data_dir / "worker.log"
        if pool == "prefork":
            self.processes = [WorkerProcess(env, log, beat=False, concurrency=concurrency)]
            pool_label = "-P solo" if concurrency == 1 else f"-P prefork -c {concurrency}"  # as WorkerProcess runs it
            self.label = f"one worker {pool_label}"
        elif pool == "solo":
            self.processes = [
                WorkerProcess(env, data_dir / f"worker-{i}.log", beat=False, concurrency=1) for i in range(concurrency)
            ]
            self.label = f"{concurrency} workers -P solo"
        elif pool in ("threads", "default"):
            self.processes = [WorkerProcess(env, log, beat=False, concurrency=concurrency, pool=pool)]
            self.label = f"one worker -P threads -c {concurrency}" if pool == "threads" else "one worker, kefu's pool"
        else:
            raise ValueError(f"no pool {pool!r}: prefork, solo, threads or default")

    def start(self) -> None:
        for process in self.processes:
            process.start()

    def wait_ready(self, app: Celery, timeout_s: float = 30) -> None:
        for process in self.processes:
            process.wait_ready(app, timeout_s)

    def stop(self) -> None:
        for process in self.processes:
            process.stop()

    def cpu_s(self) -> float:
        """CPU seconds used so far by every worker's process tree."""
        return sum(_tree_cpu_s(process.pid) for process in self.processes if process.pid is not None)


class Rig:
    """One shard's workers and its accounts. Several rigs can share a Redis (`flush=False`
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
        pool: str = "prefork",
        env: dict[str, str] | None = None,
        **overrides: Any,
    ) -> None:
        """`env`: more settings for the workers, which `overrides` gives this process's settings."""
        if flush:
            redis.Redis.from_url(broker).flushdb()
        simulator = {"platform_path": platform_path} if platform_path else {}
        self.settings = load_settings(
            data_dir=data_dir, broker_url=broker, shard=shard, simulator=simulator, **overrides
        )
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
        env = {"KEFU_DATA_DIR": str(data_dir), "KEFU_BROKER_URL": broker, **(env or {})}
        if shard != "default":
            env["KEFU_SHARD"] = shard
        if platform_path:
            env["KEFU_SIMULATOR__PLATFORM_PATH"] = str(platform_path)
        self.workers = Workers(env, data_dir, concurrency, pool)

    def noop_round_trips(self, count: int) -> list[float]:
        ping = self.app.tasks[tasks.ping.name]
        times = []
        for _ in range(count):
            began = time.perf_counter()
            assert ping.delay().get(timeout=10) == "pong"
            times.append((time.perf_counter() - began) * 1000)
        return times

    def offer(self, rate: float, seconds: float, drain_s: float = 15) -> Run:
        """Buyer messages at `rate`/s for `seconds`, each answered by kefu (page -> reply)."""
        return offer([(self, account) for account in self.accounts], rate, seconds, drain_s)

    def offer_chain(self, rate: float, seconds: float, drain_s: float = 15) -> Run:
        """Probe chains at `rate`/s for `seconds` (publish -> the last hop ran). The results are
        read once everything is published, in one MGET per poll."""
        ingest = self.app.tasks[probe.ingest_hop.name]
        backend = self.app.backend
        sent: dict[str, float] = {}
        start = time.time()
        for _ in _paced(rate, seconds):
            probe_id = f"probe-{uuid.uuid4().hex}"
            sent[probe_id] = time.time()
            ingest.apply_async((probe_id,))
        last_offer = time.time() - start
        ran: dict[str, float] = {}
        deadline = time.time() + drain_s
        while len(ran) < len(sent) and time.time() < deadline:
            waiting = [p for p in sent if p not in ran]
            values = backend.mget([backend.get_key_for_task(p) for p in waiting])
            for probe_id, raw in zip(waiting, values, strict=True):
                if raw is not None and (meta := backend.decode_result(raw))["status"] == "SUCCESS":
                    ran[probe_id] = float(meta["result"])
            if len(ran) < len(sent):
                time.sleep(0.05)
        latencies = [(at - sent[p]) * 1000 for p, at in ran.items()]
        return Run(len(sent), latencies, last_offer, max(ran.values(), default=start) - start)

    def wait_quiet(self, bound_s: float = 30) -> None:
        """Until nothing is in flight: the store is quiet, no message waits in a queue of the
        shard and none is delivered but unacknowledged (a backlog, or the trailing work of the
        last message)."""
        client = redis.Redis.from_url(self.settings.broker_url)
        queues = [queue_name(family, self.settings.shard) for family in FAMILIES]

        def broker_empty() -> bool:
            return sum(client.llen(q) for q in queues) + client.hlen("unacked") == 0

        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline and not (broker_empty() and is_quiet(runtime_for(self.app).store)):
            time.sleep(0.1)


_buyers = itertools.count(1)  # buyer names are never reused within a process


def offer(lanes: Sequence[tuple[Rig, str]], rate: float, seconds: float, drain_s: float = 15) -> Run:
    """Publish at `rate`/s for `seconds`, each message from a new buyer, round robin over the
    lanes (an account, and the rig whose shard serves it; every rig on one simulated platform);
    wait up to `drain_s` for the replies."""
    platform = lanes[0][0].platform
    sent: dict[tuple[str, str], float] = {}
    after = max((s.id for s in platform.received()), default=0)
    start = time.time()
    for i in _paced(rate, seconds):
        rig, account = lanes[i % len(lanes)]
        buyer = f"buyer{next(_buyers)}"
        message = rig.platform.buyer_says(account, buyer, buyer, "请问什么时候发货？")
        sent[(account, buyer)] = time.time()
        receive_page(rig.app, rig.transport.page_of(account, [message]))
    last_offer = time.time() - start
    deadline = time.time() + drain_s
    replies: list[ReceivedSend] = []
    while time.time() < deadline:
        replies = [s for s in platform.received(after_id=after) if (s.account_id, s.recipient_id) in sent]
        if len(replies) >= len(sent):
            break
        time.sleep(0.05)
    latencies = [(r.received_at / 1000 - sent[(r.account_id, r.recipient_id or "")]) * 1000 for r in replies]
    last_answer = max((r.received_at / 1000 for r in replies), default=start) - start
    return Run(len(sent), latencies, last_offer, last_answer)


@dataclass
class Metered:
    """A fixed-rate run with the workers' CPU over it (from before the first offer until the
    last message's work was done)."""

    run: Run
    cpu_s: float
    wall_s: float
    redis_calls: Counter[str]  # broker commands over the run, publisher's and workers' (and the bench's polls)

    @property
    def cpu_ms_per_message(self) -> float:
        return self.cpu_s * 1000 / max(self.run.offered, 1)


def metered(rig: Rig, load: Callable[[], Run]) -> Metered:
    rig.wait_quiet()
    began, cpu, commands = time.monotonic(), rig.workers.cpu_s(), redis_calls(rig.settings.broker_url)
    run = load()
    rig.wait_quiet()
    calls = redis_calls(rig.settings.broker_url) - commands
    return Metered(run, rig.workers.cpu_s() - cpu, time.monotonic() - began, calls)


def redis_calls(url: str) -> Counter[str]:
    """Calls of each Redis command so far (the whole server's: run on a Redis nothing else uses)."""
    stats = redis.Redis.from_url(url).info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(stat["calls"]) for name, stat in stats.items()})


def idle_cpu_ms_per_s(rig: Rig, seconds: float = 5) -> float:
    """The workers' CPU with nothing to do (heartbeats, polling, lease renewal)."""
    rig.wait_quiet()
    cpu = rig.workers.cpu_s()
    time.sleep(seconds)
    return (rig.workers.cpu_s() - cpu) * 1000 / seconds


def _ms(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def step_up(rig: Rig, loads: dict[str, Callable[[float], Run]], console: Console) -> dict[str, float]:
    """Each load through STEP_RATES, side by side at each rate, until it misses; returns the
    highest rate each sustained. A step that misses is measured once more, after its backlog
    drained (at 10 msg/s for 5 s, one slow message is the p99), and the second one counts."""
    best = dict.fromkeys(loads, 0.0)
    going = list(loads)
    table = Table(
        "offered msg/s",
        "load",
        "p50 ms",
        "p99 ms",
        "unanswered",
        "drained in s",
        "sustained",
        title=f"step-up ({STEP_S:g} s per step)",
        caption=f"sustained: {_criterion()}",
    )

    def measure(name: str, rate: float, attempt: int) -> bool:
        run = loads[name](rate)
        table.add_row(
            f"{rate:g}",
            name if attempt == 1 else f"{name}, again",
            _ms(run.p(0.5)),
            _ms(run.p(0.99)),
            str(run.unanswered),
            f"{run.drained_s:.1f}",
            "yes" if run.sustained else "no",
        )
        if not run.sustained:
            rig.wait_quiet()
        time.sleep(1)
        return run.sustained

    for rate in STEP_RATES:
        if not going:
            break
        for name in list(going):
            if any(measure(name, rate, attempt) for attempt in (1, 2)):  # the second only after a miss
                best[name] = rate
            else:
                going.remove(name)
        table.add_section()
    console.print(table)
    return best


def _criterion() -> str:
    return f"all answered, p99 <= {P99_BOUND_MS:g} ms, drained within {DRAIN_BOUND_S:g} s of the last offer"


def _best(rate: float) -> str:
    return f">= {rate:g}" if rate == STEP_RATES[-1] else f"{rate:g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--rate", type=float, default=20, help="offered rate of the latency and CPU runs (msg/s)")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--concurrency", type=int, default=2, help="pool processes (prefork) or solo workers")
    parser.add_argument("--pool", choices=("prefork", "solo"), default="prefork")
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        rig = Rig(Path(tmp), args.redis, args.concurrency, pool=args.pool)
        rig.workers.start()
        try:
            rig.workers.wait_ready(rig.app)
            rig.noop_round_trips(20)  # warm-up
            rig.offer_chain(5, 2)
            rig.offer(5, 2)
            idle = idle_cpu_ms_per_s(rig)
            # one after another, each waiting for its answer (nothing to drain)
            noop = metered(rig, lambda: Run(200, rig.noop_round_trips(200), 0, 0))
            chain = metered(rig, lambda: rig.offer_chain(args.rate, args.seconds))
            kefu = metered(rig, lambda: rig.offer(args.rate, args.seconds))

            table = Table(
                "measure",
                "p50 ms",
                "p99 ms",
                "n",
                "unanswered",
                "worker CPU ms/msg",
                title=f"e2e on Redis, {rig.workers.label}",
            )
            rows = (
                ("no-op task round trip, one at a time", noop),
                (f"4-task no-op chain at {args.rate:g} msg/s", chain),
                (f"kefu page -> reply at {args.rate:g} msg/s", kefu),
            )
            for label, m in rows:
                table.add_row(
                    label,
                    _ms(m.run.p(0.5), 1),
                    _ms(m.run.p(0.99), 1),
                    str(len(m.run.latencies)),
                    str(m.run.unanswered),
                    f"{m.cpu_ms_per_message:.2f}",
                )
            console.print(table)
            for label, m in rows[1:]:
                per = {name: calls / max(m.run.offered, 1) for name, calls in m.redis_calls.most_common(8)}
                listed = ", ".join(f"{name} {n:.1f}" for name, n in per.items())
                total = sum(m.redis_calls.values()) / max(m.run.offered, 1)
                print(f"Redis commands per message, {label}: {total:.1f} ({listed})")
            print(
                f"worker CPU idle: {idle:.1f} ms/s (in a {args.seconds:g} s run at {args.rate:g} msg/s,"
                f" ~{idle * kefu.wall_s / max(kefu.run.offered, 1):.2f} ms of each message's figure)"
            )
            noop_p50, chain_p50, kefu_p50 = noop.run.p(0.5), chain.run.p(0.5), kefu.run.p(0.5)
            if noop_p50 and chain_p50 and kefu_p50:
                print(f"ratio of p50, kefu / no-op task: {kefu_p50 / noop_p50:.1f}x,", end=" ")
                print(f"kefu / chain: {kefu_p50 / chain_p50:.1f}x")

            best = step_up(
                rig,
                {
                    "chain": lambda rate: rig.offer_chain(rate, STEP_S),
                    "kefu": lambda rate: rig.offer(rate, STEP_S),
                },
                console,
            )
            print(f"highest sustained rate: chain {_best(best['chain'])} msg/s, kefu {_best(best['kefu'])} msg/s")
            if chain.cpu_ms_per_message > 0:
                ratio = kefu.cpu_ms_per_message / chain.cpu_ms_per_message
                print(f"ratio kefu / chain, worker CPU per message: {ratio:.1f}x")
            if best["chain"] > 0:
                capped = " (chain capped by the step list: at most)" if best["chain"] == STEP_RATES[-1] else ""
                print(f"ratio kefu / chain, highest sustained rate: {best['kefu'] / best['chain']:.2f}{capped}")
        finally:
            rig.workers.stop()


if __name__ == "__main__":
    main()
