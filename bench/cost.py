"""Where a buyer message's cost goes, counted: SQL statements and transactions per pipeline step,
durable commits, session-log fsyncs, and CPU per step. No broker (the broker hops are counted
by `bench.e2e`); each message from its own buyer, through the same steps a worker runs.

    python -m bench.cost [--messages 200]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.growth import ACCOUNT, raw_commit_ms, run_inline
from config import load_settings
from runtime import pipeline
from runtime.accounts import AccountSpec, create_account
from runtime.pages import InboundPage
from runtime.routes import RouteSpec, create_route
from transports.simulator import SimulatedPlatform, SimulatorTransport
from worker.context import WorkerRuntime


class Counts:
    def __init__(self) -> None:
        self.statements: Counter[str] = Counter()  # step -> SQL statements (BEGIN/COMMIT/PRAGMA apart)
        self.transactions: Counter[str] = Counter()
        self.durable: Counter[str] = Counter()
        self.fsyncs: Counter[str] = Counter()  # fsync/fdatasync outside SQLite: the session log
        self.cpu_ms: defaultdict[str, float] = defaultdict(float)
        self.step = "receive"
        self._last = ""

    def statement(self, text: str) -> None:
        """SQLite's trace shows a statement again for each trigger it fires: counted once."""
        if text == self._last:
            return
        self._last = text
        head = text.split(None, 1)[0].upper() if text.strip() else ""
        if head == "BEGIN":
            self.transactions[self.step] += 1
        elif text == "PRAGMA synchronous = FULL":
            self.durable[self.step] += 1
        elif head not in ("COMMIT", "ROLLBACK", "PRAGMA"):
            self.statements[self.step] += 1


def run(runtime: WorkerRuntime, counts: Counts, page: dict[str, object]) -> None:
    outer: list[str] = []  # a reply's attempt runs inside its turn: counted apart from it

    @contextmanager
    def counted(step: str) -> Iterator[None]:
        outer.append(counts.step)
        counts.step = step
        began = time.process_time()
        yield
        spent = (time.process_time() - began) * 1000
        counts.cpu_ms[step] += spent
        counts.step = outer.pop()
        if outer:
            counts.cpu_ms[counts.step] -= spent

    with counted("receive"):
        (ingest,) = pipeline.receive(runtime, InboundPage.model_validate(page)).follow_ups
    run_inline(runtime, ingest, counted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(data_dir=Path(tmp))
        runtime = WorkerRuntime(settings)
        create_account(runtime.store, AccountSpec(id=ACCOUNT, platform="simulator", identity="bench"))
        create_route(runtime.store, RouteSpec(id="all", account_id=ACCOUNT, conversation_type="direct"), op_id="r")
        platform = SimulatedPlatform(settings.simulator_path)
        transport = SimulatorTransport(platform)
        counts = Counts()
        warm = transport.page_of(ACCOUNT, [platform.buyer_says(ACCOUNT, "warm", "买家", "什么时候发货？")])
        run(runtime, Counts(), warm.model_dump(mode="json"))  # imports, first connections
        runtime.store.trace(counts.statement)
        real = os.fsync, os.fdatasync

        def counted_sync(sync: Callable[[int], None]) -> Callable[[int], None]:
            def call(fd: int) -> None:
                counts.fsyncs[counts.step] += 1
                sync(fd)

            return call

        os.fsync, os.fdatasync = map(counted_sync, real)
        began = time.perf_counter()
        for n in range(args.messages):
            said = platform.buyer_says(ACCOUNT, f"b{n}", "买家", "什么时候发货？")
            run(runtime, counts, transport.page_of(ACCOUNT, [said]).model_dump(mode="json"))
        wall = time.perf_counter() - began
        os.fsync, os.fdatasync = real
        replies = len(platform.received(ACCOUNT)) - 1
        raw = raw_commit_ms(Path(tmp), synchronous="FULL")
    n = args.messages
    table = Table(
        "step",
        "SQL statements",
        "transactions",
        "durable commits",
        "log fsyncs",
        "CPU ms",
        title=f"per buyer message ({n} messages, {replies} replies)",
    )
    order = ["receive", "Ingest", "Admit", "RunTurn", "Attempt"]  # the steps one message takes
    for step in order:
        table.add_row(
            step,
            f"{counts.statements[step] / n:.1f}",
            f"{counts.transactions[step] / n:.1f}",
            f"{counts.durable[step] / n:.1f}",
            f"{counts.fsyncs[step] / n:.1f}",
            f"{counts.cpu_ms[step] / n:.2f}",
        )
    table.add_row(
        "total",
        f"{sum(counts.statements.values()) / n:.1f}",
        f"{sum(counts.transactions.values()) / n:.1f}",
        f"{sum(counts.durable.values()) / n:.1f}",
        f"{sum(counts.fsyncs.values()) / n:.1f}",
        f"{sum(counts.cpu_ms.values()) / n:.2f}",
    )
    console = Console()
    console.print(table)
    console.print(
        f"wall {wall / n * 1000:.2f} ms per message; a raw SQLite insert + durable commit {raw:.3f} ms (baseline)"
    )


if __name__ == "__main__":
    main()
