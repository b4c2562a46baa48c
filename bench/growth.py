"""Per-message cost as one customer's session grows, and as the store fills: no broker.

Each buyer message runs the whole pipeline in this process, the steps a worker would run on
its tasks (ingest, admission, the agent turn with the memory engine on, the outbox attempt)
against a real store, session log and simulator: once with the rules agent, once with the
`openai` provider against a fake Chat Completions server on loopback that answers at once
(the model path: each call's request carries the whole view, which grows with the session up
to what the memory engine's archive leaves in the window). CPU is this thread's: the fake
server's threads are not counted. The baselines in the same run: a raw SQLite insert-and-commit
of one row, and for the reconciler an indexed probe of the pending input.

    python -m bench.growth [--turns 1000] [--history 0] [--backlog] [--buyers 1] [--paths rules,model]

`--turns`: one customer, one message per turn; the cost is reported per window of turns
(the median of the 40 messages up to the turn, the first one apart).
`--history N`: N inbound messages of 1,000 other customers are stored first, so the cost is
read at that store size (and the store's size per 100,000 messages is printed); they are
settled (committed) unless `--backlog`, which leaves them waiting for admission, an hour old
(an outage's backlog). Either way the reconciler's pass (`pipeline.reconcile`) is timed.
`--buyers N`: the turns' messages come from N buyers in turn instead of one (the process's
resident memory before and after the turns is printed: e.g. 10,000 turns of 10,000 buyers).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from config import load_settings
from runtime import pipeline
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.routes import RouteSpec, create_route
from runtime.pipeline import Admit, Attempt, FollowUp, Ingest, RunTurn, Settle
from runtime.ports import Services
from runtime.store import now_ms
from tests.fakes.openai_server import FakeOpenAI
from transports.simulator import SimulatedPlatform, SimulatorTransport
from worker.context import WorkerRuntime

ACCOUNT = "bench-shop"


def run_inline(
    runtime: Services, first: FollowUp, around: Callable[[str], AbstractContextManager[object]] = nullcontext
) -> None:
    """The follow-ups a message makes due, run here in order as a worker runs them: each reply
    a turn registers is attempted while the turn goes on (worker.dispatch.turn); the memory
    engine's archive is left out (its own task family). `around(step)` wraps each step (bench.cost)."""
    due: deque[FollowUp] = deque([first])

    def run(work: FollowUp) -> None:
        with around(type(work).__name__):
            match work:
                case Ingest(page, _):
                    step = pipeline.ingest(runtime, page)
                case Admit(customer_id):
                    step = pipeline.admit(runtime, customer_id)
                case RunTurn(customer_id, _):
                    step = pipeline.turn(runtime, customer_id, at_once, sends_here=True)
                case Attempt(request_id, _, retries, begun):
                    step = pipeline.deliver(runtime, request_id, retries, begun)
                case Settle(request_id):
                    step = pipeline.settle(runtime, request_id)
                case _:
                    return
        due.extend(step.follow_ups)

    def at_once(work: FollowUp) -> None:
        run(work) if isinstance(work, Attempt) else due.append(work)

    while due:
        run(due.popleft())


def fill_history(runtime: WorkerRuntime, transport: SimulatorTransport, platform: SimulatedPlatform, n: int) -> None:
    """`n` stored inbound messages of 1,000 other customers, 100 to a page, ingested only."""
    for start in range(0, n, 100):
        said = [platform.buyer_says(ACCOUNT, f"h{(start + i) % 1000}", "买家", "历史消息") for i in range(100)]
        pipeline.ingest(runtime, transport.page_of(ACCOUNT, said).model_dump(mode="json"))


def raw_commit_ms(folder: Path, rows: int = 500, synchronous: str = "NORMAL") -> float:
    """The baseline: one row inserted and committed, in WAL mode."""
    db = sqlite3.connect(folder / f"raw-{synchronous}.sqlite", isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute(f"PRAGMA synchronous = {synchronous}")
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    began = time.perf_counter()
    for _ in range(rows):
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO t (body) VALUES (?)", ("什么时候发货？",))
        db.execute("COMMIT")
    db.close()
    return (time.perf_counter() - began) / rows * 1000


@dataclass
class Run:
    """One path's figures."""

    name: str
    wall_ms: list[float]
    cpu_ms: list[float]
    replies: int
    log_mb: float
    rss_mb: tuple[float, float]
    filled_s: float = 0.0
    stored_mb: float = 0.0
    reconcile: tuple[float, float, int, float] | None = None  # pass ms, probe ms, admissions, DISTINCT ms


def run_path(folder: Path, name: str, agent: dict[str, Any], args: argparse.Namespace, reconcile: bool) -> Run:
    settings = load_settings(data_dir=folder, agent=agent)
    runtime = WorkerRuntime(settings)
    create_account(runtime.store, AccountSpec(id=ACCOUNT, platform="simulator", identity="bench"))
    create_route(runtime.store, RouteSpec(id="all", account_id=ACCOUNT, conversation_type="direct"), op_id="r")
    platform = SimulatedPlatform(settings.simulator_path)
    transport = SimulatorTransport(platform)
    filled = time.perf_counter()
    fill_history(runtime, transport, platform, args.history)
    filled = time.perf_counter() - filled
    with sqlite3.connect(settings.delivery_path) as db:  # the history settled, or an hour overdue
        if args.backlog:
            db.execute("UPDATE inbound_message SET received_at = received_at - 3600000 WHERE state = 'pending'")
        else:
            db.execute("UPDATE inbound_message SET state = 'committed' WHERE state = 'pending'")
    stored_mb = sum(p.stat().st_size for p in folder.glob("*.sqlite*")) / 1e6
    passes = reconcile_ms(runtime, settings.delivery_path) if reconcile and args.history else None
    rss_before = _rss_mb()
    costs: list[float] = []
    cpu: list[float] = []
    for turn in range(args.turns):
        buyer = "loyal" if args.buyers == 1 else f"buyer{turn % args.buyers}"
        said = platform.buyer_says(ACCOUNT, buyer, "老顾客", f"第{turn}次：什么时候发货？")
        page = transport.page_of(ACCOUNT, [said])
        began, began_cpu = time.perf_counter(), time.thread_time()
        run_inline(runtime, Ingest(page.model_dump(mode="json")))
        costs.append((time.perf_counter() - began) * 1000)
        cpu.append((time.thread_time() - began_cpu) * 1000)
    replies = len(platform.received(ACCOUNT))  # the history is ingested only: never answered
    log_mb = sum(p.stat().st_size for p in settings.sessions_dir.glob("*.zst")) / 1e6
    return Run(name, costs, cpu, replies, log_mb, (rss_before, _rss_mb()), filled, stored_mb, passes)


def reconcile_ms(runtime: WorkerRuntime, delivery: Path, passes: int = 20) -> tuple[float, float, int, float]:
    """The reconciler's pass (median of `passes`), beside a raw indexed probe of the pending
    input (the baseline); how many admissions one pass hands out; and what the query of the
    customers to admit cost before it probed the index customer by customer (a DISTINCT over
    every pending row, raw sqlite3, once)."""
    times, handed = [], 0
    for _ in range(passes):
        began = time.perf_counter()
        step = pipeline.reconcile(runtime)
        times.append((time.perf_counter() - began) * 1000)
        handed = sum(isinstance(work, Admit) for work in step.follow_ups)
    db = sqlite3.connect(delivery)
    probe = "SELECT min(customer_id) FROM inbound_message WHERE state = 'pending'"
    began = time.perf_counter()
    for _ in range(1000):
        db.execute(probe).fetchone()
    raw = time.perf_counter() - began  # ms per probe: seconds / 1000 probes × 1000
    began = time.perf_counter()
    db.execute(_DISTINCT_WAITING, (now_ms(), 1000)).fetchall()
    distinct = (time.perf_counter() - began) * 1000
    db.close()
    return statistics.median(times), raw, handed, distinct


_DISTINCT_WAITING = (
    "SELECT DISTINCT customer_id FROM inbound_message WHERE state = 'pending'"
    " AND sender_role IN ('external', 'human-native', 'operator-dm') AND received_at < ? LIMIT ?"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--history", type=int, default=0)
    parser.add_argument("--backlog", action="store_true")
    parser.add_argument("--buyers", type=int, default=1)
    parser.add_argument("--paths", default="rules,model")
    args = parser.parse_args()
    paths = args.paths.split(",")
    windows = sorted({w for w in (10, 100, 500, 1000, 2000, 5000) if w <= args.turns} | {args.turns})
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # the shard lease thread may still write
        folder = Path(tmp)
        if "rules" in paths:
            runs.append(run_path(folder / "rules", "rules", {}, args, reconcile=True))
        if "model" in paths:
            with FakeOpenAI(record=False) as fake:
                endpoint = {"base_url": fake.base_url, "api_key": "sk-bench", "model": "fake"}
                model = {"provider": "openai", "openai": endpoint}
                runs.append(run_path(folder / "model", "model (fake, instant)", model, args, reconcile=not runs))
        raw = raw_commit_ms(folder)
    console = Console()
    table = Table("path", "turn", "wall ms per message", "CPU ms per message", "CPU vs turn 10", "wall × raw commit")
    for run in runs:
        cpu = run.cpu_ms
        base = statistics.median(cpu[1:10]) if args.turns >= 10 else statistics.median(cpu)
        for at in windows:
            window = slice(max(1, at - 40), at)  # the 40 messages up to this turn, the first apart
            wall, used = statistics.median(run.wall_ms[window]), statistics.median(cpu[window])
            table.add_row(run.name, f"{at:,}", f"{wall:.2f}", f"{used:.2f}", f"{used / base:.2f}×", f"{wall / raw:.1f}")
    console.print(table)
    for run in runs:
        console.print(
            f"{run.name}: {args.turns:,} messages, {run.replies:,} replied; session logs {run.log_mb:.2f} MB;"
            f" resident memory {run.rss_mb[0]:.0f} MB before the turns, {run.rss_mb[1]:.0f} MB after"
        )
    console.print(f"raw SQLite commit {raw:.3f} ms (baseline)")
    if args.history and runs:
        first = runs[0]
        per = first.stored_mb / args.history * 100_000
        console.print(
            f"history: {args.history:,} messages of 1,000 customers stored in {first.filled_s:.1f} s;"
            f" delivery store {first.stored_mb:.1f} MB, {per:.1f} MB per 100,000 messages"
        )
    passes = next((run.reconcile for run in runs if run.reconcile), None)
    if passes is not None:
        state = "waiting for admission, an hour old" if args.backlog else "settled"
        console.print(
            f"reconciler pass, the history {state}: {passes[0]:.2f} ms (median of 20), handing out"
            f" {passes[2]:,} admissions; a raw indexed probe of the pending input {passes[1]:.4f} ms (baseline);"
            f" the DISTINCT over every pending row the pass ran before: {passes[3]:.2f} ms"
        )


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


if __name__ == "__main__":
    main()
