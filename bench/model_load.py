"""Many buyers at once on a network model: page -> reply latency, throughput, worker CPU and
memory, against the model's own latency measured in the same run.

A real `celery -A worker worker` on Redis with the `openai` agent, against the fake
OpenAI-compatible endpoint (tests.fakes.openai_server, in its own process so its CPU is not the
worker's) answering every call after `--latency` ± `--jitter` seconds. A turn makes two calls:
the reply (`im_send_message`, sent at once), then the model's closing text; the latency runs
from the page's publication to the simulated platform's receipt of the reply. Each message comes
from a new buyer (no batching). Printed, for each layout:

- a step-up through `--rates` (`--step-seconds` each): answered, p50/p99 page -> reply and the
  same minus the model's mean latency, worker CPU per message (utime + stime of the worker's
  process tree, /proc), and whether the step was sustained: every message answered and
  p99 <= latency + 1 s;
- a burst of `--burst` buyers published at once: how many turns waited on the model together
  (the fake's peak of calls in flight), answered, p99;
- the worker's peak RSS (VmHWM, summed over its process tree);
- how many writes failed on the store's lock over the whole run (its threads' writers queue in
  the process: runtime.store.engine).

The baseline, the physical limit: the same rate of calls made straight to the fake, each on its
own thread (unbounded concurrency), round-trip p50/p99.

Layouts: `default` (the pool kefu picks for a network model: worker.celery_app.pool_defaults),
`prefork` (`-P prefork -c 2`, the rules agent's layout; slow: measured at `--prefork-rate`
only). Each layout runs on its own Redis database: `--redis`'s, then the next.

    python -m bench.model_load [--redis redis://127.0.0.1:6379/14] [--latency 2] [--jitter 0.2]
                               [--rates 10,20,40,60,80] [--step-seconds 10] [--burst 800]
                               [--layouts default,prefork]
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from rich.console import Console
from rich.table import Table

from bench.e2e import Rig, Run, _paced, offer, percentile
from worker.process import _child_pids

ACCOUNT = "model-shop"
SLACK_S = 1.0  # sustained: p99 <= the model's latency + this


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class FakeModel:
    """The fake endpoint in a process of its own."""

    def __init__(self, latency_s: float, jitter_s: float) -> None:
        self.port = _free_port()
        self.latency_s, self.jitter_s = latency_s, jitter_s
        command = [sys.executable, "-m", "tests.fakes.openai_server", "--port", str(self.port)]
        command += ["--latency", str(latency_s), "--jitter", str(jitter_s)]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert self.proc.stdout is not None
        self.proc.stdout.readline()  # "fake OpenAI-compatible server at …": it listens

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=5) as response:
            stats: dict[str, int] = json.load(response)
            return stats

    def call(self) -> float:
        """One chat completion straight to the fake, on a new connection: seconds."""
        body = json.dumps({"model": "fake", "messages": [{"role": "user", "content": "[counterpart x] 你好"}]})
        request = urllib.request.Request(
            f"{self.base_url}/chat/completions", body.encode(), {"Content-Type": "application/json"}
        )
        began = time.perf_counter()
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
        return time.perf_counter() - began

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def physical_limit(model: FakeModel, rate: float, seconds: float) -> list[float]:
    """Calls straight to the fake at `rate`/s, each on its own thread: round trips in ms."""
    times: list[float] = []
    threads = []
    for _ in _paced(rate, seconds):
        thread = threading.Thread(target=lambda: times.append(model.call() * 1000))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return times


def peak_rss_mb(pid: int) -> float:
    """VmHWM of a process and its living descendants, MB."""
    total = 0
    pids = [pid]
    while pids:
        current = pids.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)
        pids += _child_pids(current)
    return total / 1024


@dataclass
class Step:
    rate: float
    run: Run
    cpu_ms_per_message: float


@contextmanager
def _rig(root: Path, broker: str, model: FakeModel, layout: str) -> Iterator[Rig]:
    agent = {"provider": "openai", "openai": {"base_url": model.base_url, "api_key": "bench", "model": "fake"}}
    env = {
        "KEFU_AGENT__PROVIDER": "openai",
        "KEFU_AGENT__OPENAI__BASE_URL": model.base_url,
        "KEFU_AGENT__OPENAI__API_KEY": "bench",
        "KEFU_AGENT__OPENAI__MODEL": "fake",
    }
    pool, concurrency = ("default", 0) if layout == "default" else ("prefork", 2)
    rig = Rig(root, broker, concurrency, accounts=(ACCOUNT,), pool=pool, env=env, agent=agent)
    rig.workers.start()
    try:
        rig.workers.wait_ready(rig.app, timeout_s=60)
        yield rig
    finally:
        rig.workers.stop()


def measure(rig: Rig, rate: float, seconds: float, drain_s: float) -> Step:
    rig.wait_quiet(bound_s=120)
    cpu = rig.workers.cpu_s()
    run = offer([(rig, ACCOUNT)], rate, seconds, drain_s)
    rig.wait_quiet(bound_s=120)  # the turns' closing calls: their CPU is the message's too
    return Step(rate, run, (rig.workers.cpu_s() - cpu) * 1000 / max(run.offered, 1))


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through the rig and the fake, which stop what they started


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value / 1000:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--latency", type=float, default=2.0, help="the model's seconds per call")
    parser.add_argument("--jitter", type=float, default=0.2, help="± seconds, uniform")
    parser.add_argument("--rates", default="10,20,40,60,80", help="offered msg/s of the step-up")
    parser.add_argument("--step-seconds", type=float, default=10)
    parser.add_argument("--burst", type=int, default=800, help="buyers published at once")
    parser.add_argument("--layouts", default="default", help="default and/or prefork, comma-separated")
    parser.add_argument("--prefork-rate", type=float, default=2, help="the prefork layout's one offered rate")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _terminate)
    rates = [float(r) for r in args.rates.split(",")]
    console = Console(width=150)
    model = FakeModel(args.latency, args.jitter)
    bound_ms = (args.latency + SLACK_S) * 1000
    drain_s = args.latency * 2 + 30
    try:
        limit = Table("offered msg/s", "p50 s", "p99 s", title="physical limit: calls straight to the fake")
        limits: dict[float, tuple[float, float]] = {}
        for rate in rates:
            times = physical_limit(model, rate, args.step_seconds)
            limits[rate] = (percentile(times, 0.5), percentile(times, 0.99))
            limit.add_row(f"{rate:g}", _s(limits[rate][0]), _s(limits[rate][1]))
        console.print(limit)
        for index, layout in enumerate(args.layouts.split(",")):
            base, db = args.redis.rsplit("/", 1)
            broker = f"{base}/{int(db) + index}"  # a database each: a layout's shard lease outlives its rig here
            with tempfile.TemporaryDirectory() as tmp, _rig(Path(tmp), broker, model, layout) as rig:
                offer([(rig, ACCOUNT)], 5, 2, drain_s)  # warm-up
                table = Table(
                    "offered msg/s",
                    "answered",
                    "p50 s",
                    "p99 s",
                    "p50 / p99 over the model's latency, ms",
                    "p50 / p99 over the physical limit, ms",
                    "worker CPU ms/msg",
                    "sustained",
                    title=f"{rig.workers.label}, model {args.latency:g} s ± {args.jitter:g} s",
                    caption=f"sustained: every message answered, p99 <= {bound_ms / 1000:g} s",
                )
                best = 0.0
                for rate in rates if layout == "default" else [args.prefork_rate]:
                    step = measure(rig, rate, args.step_seconds, drain_s if layout == "default" else 600)
                    run = step.run
                    p50, p99 = run.p(0.5), run.p(0.99)
                    sustained = run.unanswered == 0 and p99 is not None and p99 <= bound_ms
                    over_model = over_limit = "-"
                    if p50 is not None and p99 is not None:
                        model_ms = args.latency * 1000
                        over_model = f"{p50 - model_ms:.0f} / {p99 - model_ms:.0f}"
                        if rate in limits:
                            over_limit = f"{p50 - limits[rate][0]:.0f} / {p99 - limits[rate][1]:.0f}"
                    table.add_row(
                        f"{rate:g}",
                        f"{len(run.latencies)} of {run.offered}",
                        _s(p50),
                        _s(p99),
                        over_model,
                        over_limit,
                        f"{step.cpu_ms_per_message:.1f}",
                        "yes" if sustained else "no",
                    )
                    if not sustained:
                        break
                    best = rate
                console.print(table)
                if layout == "default":
                    print(f"highest sustained rate: {best:g} msg/s (offered up to {rates[-1]:g})")
                    rig.wait_quiet(bound_s=120)
                    before = model.stats()["peak_in_flight"]
                    burst = offer([(rig, ACCOUNT)], 10_000, args.burst / 10_000, drain_s)
                    peak = model.stats()["peak_in_flight"]
                    print(
                        f"burst of {args.burst} buyers at once (published in {burst.last_offer_s:.1f} s):"
                        f" {len(burst.latencies)} answered, p50 {_s(burst.p(0.5))} s, p99 {_s(burst.p(0.99))} s,"
                        f" last reply {burst.drained_s:.1f} s after the last publication; model calls in flight"
                        f" at once: {peak}" + (f" (the steps' most: {before})" if before >= peak else "")
                    )
                pid = rig.workers.processes[0].pid
                if pid is not None:
                    print(f"worker peak RSS ({rig.workers.label}): {peak_rss_mb(pid):.0f} MB")
                locked = sum(process.output().count("database is locked") for process in rig.workers.processes)
                print(f"writes that failed on the store's lock (`database is locked` in the worker's log): {locked}")
    finally:
        model.close()


if __name__ == "__main__":
    main()
