"""Per-message cost as one customer's session grows, and as the store fills: no broker.

Each buyer message runs the whole pipeline in this process, the steps a worker would run on
its tasks (ingest, admission, the agent turn with the memory engine on, the outbox attempt)
against a real store, session log and simulator. The baseline in the same run is a raw
SQLite insert-and-commit of one row.

    python -m bench.growth [--turns 1000] [--history 0] [--buyers 1]

`--turns`: one customer, one message per turn; the cost is reported per window of turns.
`--history N`: N inbound messages of other customers are stored first, so the cost is read
at that store size (and the store's size per 100,000 messages is printed).
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
from pathlib import Path

from rich.console import Console
from rich.table import Table

from config import load_settings
from runtime import pipeline
from runtime.accounts import AccountSpec, create_account
from runtime.pipeline import Admit, Attempt, FollowUp, Ingest, RunTurn, Settle
from runtime.ports import Services
from runtime.routes import RouteSpec, create_route
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--history", type=int, default=0)
    parser.add_argument("--buyers", type=int, default=1)
    args = parser.parse_args()
    windows = sorted({w for w in (1, 10, 100, 500, 1000, 2000, 5000) if w <= args.turns} | {args.turns})
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # the shard lease thread may still write
        folder = Path(tmp)
        settings = load_settings(data_dir=folder)
        runtime = WorkerRuntime(settings)
        create_account(runtime.store, AccountSpec(id=ACCOUNT, platform="simulator", identity="bench"))
        create_route(runtime.store, RouteSpec(id="all", account_id=ACCOUNT, conversation_type="direct"), op_id="r")
        platform = SimulatedPlatform(settings.simulator_path)
        transport = SimulatorTransport(platform)
        filled = time.perf_counter()
        fill_history(runtime, transport, platform, args.history)
        filled = time.perf_counter() - filled
        stored_mb = sum(p.stat().st_size for p in folder.glob("*.sqlite*")) / 1e6
        rss_before = _rss_mb()
        costs: list[float] = []
        cpu: list[float] = []
        for turn in range(args.turns):
            buyer = "loyal" if args.buyers == 1 else f"buyer{turn % args.buyers}"
            page = transport.page_of(
                ACCOUNT, [platform.buyer_says(ACCOUNT, buyer, "老顾客", f"第{turn}次：什么时候发货？")]
            )
            began, began_cpu = time.perf_counter(), time.process_time()
            run_inline(runtime, Ingest(page.model_dump(mode="json")))
            costs.append((time.perf_counter() - began) * 1000)
            cpu.append((time.process_time() - began_cpu) * 1000)
        rss_after = _rss_mb()
        replies = len(platform.received(ACCOUNT))  # the history is ingested only: never answered
        raw = raw_commit_ms(folder)
        log_bytes = sum(p.stat().st_size for p in settings.sessions_dir.glob("*.zst"))
    table = Table("turn", "wall ms per message", "CPU ms per message", "CPU vs turn 10", "wall × raw commit")
    base = statistics.median(cpu[5:15]) if args.turns >= 15 else statistics.median(cpu)
    for at in windows:
        window = slice(max(0, at - 20), at)  # the 20 messages up to this turn, their median
        wall, used = statistics.median(costs[window]), statistics.median(cpu[window])
        table.add_row(f"{at:,}", f"{wall:.2f}", f"{used:.2f}", f"{used / base:.2f}×", f"{wall / raw:.1f}")
    console = Console()
    console.print(table)
    console.print(
        f"{args.turns:,} messages, {replies:,} replied; history {args.history:,} messages stored in {filled:.1f} s;"
        f" raw SQLite commit {raw:.3f} ms; session logs {log_bytes / 1e6:.2f} MB"
    )
    if args.history:
        per = stored_mb / args.history * 100_000
        console.print(f"delivery store after the history: {stored_mb:.1f} MB, {per:.1f} MB per 100,000 messages")
    console.print(f"resident memory: {rss_before:.0f} MB before the turns, {rss_after:.0f} MB after")


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


if __name__ == "__main__":
    main()
