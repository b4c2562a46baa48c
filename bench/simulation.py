"""Simulation batch throughput: scripted conversations per minute through a real worker (the
simulator platform, the listener, ingest, admission, turns, the outbox), with the rules agent
and with an OpenAI-compatible model (the tests' fake server on loopback, answering at once), and
the round trip of a no-op Celery task on the same worker as the baseline of one step.

Each conversation is a buyer of its own with `--steps` questions, each waiting for its reply;
`--concurrency` conversations run at once.

    python -m bench.simulation [--conversations 40] [--steps 3] [--concurrency 4]
                               [--broker redis://127.0.0.1:6379/14 | embedded]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from config import load_settings
from runtime.store import DeliveryStore
from tests.fakes.openai_server import FakeOpenAI
from transports.simulator import SimulatedPlatform
from transports.simulator.script import Script
from worker.celery_app import make_app
from worker.simulation import BatchReport, Simulation, ensure_sample_shop, serving
from worker.tasks import pipeline

QUESTIONS = ["今天下单什么时候发货？", "可以开发票吗", "能用花呗分期吗？", "有优惠券吗", "这款是什么材质的？"]


def script(conversations: int, steps: int) -> Script:
    return Script.model_validate(
        {
            "conversations": [
                {
                    "name": f"c{n}",
                    "buyer": {"id": f"b{n}", "name": f"买家{n}"},
                    "steps": [
                        {"say": QUESTIONS[(n + s) % len(QUESTIONS)], "expect": {"reply": True}} for s in range(steps)
                    ],
                }
                for n in range(conversations)
            ]
        }
    )


def run(folder: Path, broker: str, env: dict[str, str], batch: Script, concurrency: int) -> tuple[BatchReport, float]:
    """The batch on a fresh data dir, and the no-op round trip's median (ms) on the same worker."""
    settings = load_settings(data_dir=folder, broker_url=broker)
    store = DeliveryStore(settings.delivery_path, settings.delivery)
    ensure_sample_shop(store)
    simulation = Simulation(store, SimulatedPlatform(settings.simulator_path), "sim-shop", batch, 120.0, run="")
    worker_env = {"KEFU_DATA_DIR": str(folder), "KEFU_BROKER_URL": broker, **env}
    with serving(settings, worker_env, folder / "worker.log", Console(quiet=True)):
        ping = make_app(settings).tasks[pipeline.ping.name]
        trips = []
        for _ in range(30):
            began = time.perf_counter()
            ping.delay().get(timeout=10)
            trips.append((time.perf_counter() - began) * 1000)
        report = simulation.run_batch(concurrency)
    return report, statistics.median(trips[5:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=40)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/14", help="a Redis nothing else uses, or embedded")
    args = parser.parse_args()
    batch = script(args.conversations, args.steps)
    console = Console(width=140)
    title = f"{args.conversations} conversations × {args.steps} steps, concurrency {args.concurrency}"
    columns = ["agent", "conversations/min", "steps/s", "mean step ms", "no-op round trip ms", "step / no-op", "passed"]
    table = Table(*columns, title=title)
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAI() as fake:
        model = {
            "KEFU_AGENT__PROVIDER": "openai",
            "KEFU_AGENT__OPENAI__BASE_URL": fake.base_url,
            "KEFU_AGENT__OPENAI__API_KEY": "sk-bench",
            "KEFU_AGENT__OPENAI__MODEL": "fake",
        }
        for label, env in (("rules", {}), ("openai (fake, instant)", model)):
            report, noop_ms = run(Path(tmp) / label.split()[0], args.broker, env, batch, args.concurrency)
            steps = sum(c.steps for c in report.conversations)
            step_ms = 1000 * report.seconds * args.concurrency / steps
            passed = sum(c.passed for c in report.conversations)
            figures = [f"{report.per_minute:.0f}", f"{steps / report.seconds:.1f}", f"{step_ms:.0f}", f"{noop_ms:.1f}"]
            table.add_row(label, *figures, f"{step_ms / noop_ms:.1f}x", f"{passed}/{len(report.conversations)}")
    console.print(table)
    console.print("mean step ms: wall time × concurrency / steps (a buyer waits for each reply before the next)")


if __name__ == "__main__":
    main()
