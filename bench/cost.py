"""Where a buyer message's cost goes, counted: SQL statements and transactions per pipeline step
(the delivery store's, and the memory store's apart), durable commits, session-log fsyncs, and
CPU per step. No broker (the broker hops are counted by `bench.e2e`); each message from its own
buyer, through the same steps a worker runs.

The baseline in the same run: raw sqlite3 replaying every statement the messages ran, with
their values, transactions and pragmas, on copies of both stores as they were before the
messages, and the same session-log fsyncs (an append and fdatasync each): the storage work
alone, without kefu's Python around it. CPU is this thread's.

    python -m bench.cost [--messages 200]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sqlite3
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.growth import ACCOUNT, raw_commit_ms, run_inline
from config import load_settings
from runtime import pipeline
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.routes import RouteSpec, create_route
from runtime.inbound.pages import InboundPage
from transports.simulator import SimulatedPlatform, SimulatorTransport
from worker.context import WorkerRuntime
from worker.shard_lease import release_shard


class Counts:
    def __init__(self) -> None:
        self.statements: Counter[str] = Counter()  # step -> SQL statements (BEGIN/COMMIT/PRAGMA apart)
        self.transactions: Counter[str] = Counter()
        self.durable: Counter[str] = Counter()
        self.memory: Counter[str] = Counter()  # the memory store's statements (BEGIN/COMMIT/PRAGMA apart)
        self.fsyncs: Counter[str] = Counter()  # fsync/fdatasync outside SQLite: the session log
        self.cpu_ms: defaultdict[str, float] = defaultdict(float)
        self.step = "receive"
        self.ran: list[tuple[str, str]] = []  # (store, statement) in the order they ran, for the replay
        self._last = ""

    def statement(self, text: str) -> None:
        """SQLite's trace shows a write again for each trigger it fires: counted once (a read
        fires none: the same read again is run again)."""
        head = text.split(None, 1)[0].upper() if text.strip() else ""
        if text == self._last and head in ("INSERT", "UPDATE", "DELETE", "REPLACE"):
            return
        self._last = text
        self.ran.append(("delivery", text))
        if head == "BEGIN":
            self.transactions[self.step] += 1
        elif text == "PRAGMA synchronous = FULL":
            self.durable[self.step] += 1
        elif head not in ("COMMIT", "ROLLBACK", "PRAGMA"):
            self.statements[self.step] += 1

    def memory_statement(self, text: str) -> None:
        self.ran.append(("memory", text))
        if text.split(None, 1)[0].upper() not in ("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA"):
            self.memory[self.step] += 1

    def fsync(self) -> None:
        self.fsyncs[self.step] += 1
        self.ran.append(("fsync", ""))


def replay(ran: list[tuple[str, str]], stores: dict[str, Path], folder: Path) -> float:
    """The baseline: CPU ms of raw sqlite3 running `ran` on `stores` (copies), each log fsync an
    append and fdatasync of a file."""
    connections = {name: sqlite3.connect(path, isolation_level=None) for name, path in stores.items()}
    for db in connections.values():
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
    fd = os.open(folder / "raw-log", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    began = time.thread_time()
    for store, text in ran:
        if store == "fsync":
            os.write(fd, b"x" * 200)
            os.fdatasync(fd)
        else:
            connections[store].execute(text).fetchall()
    spent = time.thread_time() - began
    os.close(fd)
    for db in connections.values():
        db.close()
    return spent * 1000


def copy_store(source: Path, target: Path) -> Path:
    with sqlite3.connect(source) as db, sqlite3.connect(target) as copy:
        db.backup(copy)
    return target


def run(runtime: WorkerRuntime, counts: Counts, page: dict[str, object]) -> None:
    outer: list[str] = []  # a reply's attempt runs inside its turn: counted apart from it

    @contextmanager
    def counted(step: str) -> Iterator[None]:
        outer.append(counts.step)
        counts.step = step
        began = time.thread_time()
        yield
        spent = (time.thread_time() - began) * 1000
        counts.cpu_ms[step] += spent
        counts.step = outer.pop()
        if outer:
            counts.cpu_ms[counts.step] -= spent

    with counted("receive"):
        (ingest,) = pipeline.receive(runtime, InboundPage.model_validate(page)).follow_ups
    run_inline(runtime, ingest, counted)


def measure(folder: Path, messages: int) -> tuple[Counts, float, int, float]:
    """The counts of `messages` buyer messages, the wall seconds they took, the replies, and
    the baseline's CPU ms (the replay)."""
    settings = load_settings(data_dir=folder / "kefu")
    runtime = WorkerRuntime(settings)
    create_account(runtime.store, AccountSpec(id=ACCOUNT, platform="simulator", identity="bench"))
    create_route(runtime.store, RouteSpec(id="all", account_id=ACCOUNT, conversation_type="direct"), op_id="r")
    platform = SimulatedPlatform(settings.simulator_path)
    transport = SimulatorTransport(platform)
    for n in range(20):  # imports, first connections, caches
        warm = transport.page_of(ACCOUNT, [platform.buyer_says(ACCOUNT, f"warm{n}", "买家", "什么时候发货？")])
        run(runtime, Counts(), warm.model_dump(mode="json"))
    memory = runtime.memory
    assert memory is not None, "the memory engine is on by default"
    stores = {
        "delivery": copy_store(settings.delivery_path, folder / "raw-delivery.sqlite"),
        "memory": copy_store(settings.memory_path, folder / "raw-memory.sqlite"),
    }
    counts = Counts()
    runtime.store.trace(counts.statement)
    memory.store._connection().dbapi.set_trace_callback(counts.memory_statement)  # this thread's connection
    real = os.fsync, os.fdatasync

    def counted_sync(sync: Callable[[Any], None]) -> Callable[[Any], None]:
        def call(fd: Any) -> None:
            counts.fsync()
            sync(fd)

        return call

    os.fsync, os.fdatasync = map(counted_sync, real)  # type: ignore[assignment]
    began = time.perf_counter()
    try:
        for n in range(messages):
            said = platform.buyer_says(ACCOUNT, f"b{n}", "买家", "什么时候发货？")
            run(runtime, counts, transport.page_of(ACCOUNT, [said]).model_dump(mode="json"))
    finally:
        os.fsync, os.fdatasync = real
        runtime.store.trace(None)
        memory.store._connection().dbapi.set_trace_callback(None)
    wall = time.perf_counter() - began
    replies = len(platform.received(ACCOUNT)) - 20
    return counts, wall, replies, replay(counts.ran, stores, folder)


def _measure_and_release(folder: Path, messages: int) -> tuple[Counts, float, int, float]:
    try:
        return measure(folder, messages)
    finally:
        release_shard()


def measure_apart(folder: Path, messages: int) -> tuple[Counts, float, int, float]:
    """`measure` in a process of its own, which has exited when this returns. The runtime starts
    threads that write under the folder while they live (the shard lease's renewer, and the
    turn leases' renewals, a thread for the life of the process that may be mid-renewal as the
    last message ends): run in this process, one of them could open a store file again while
    the folder was being removed (a run failed so, after a "renewing the lease failed"
    warning). A process that has exited has no threads left to do so."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_measure_and_release, folder, messages).result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        counts, wall, replies, baseline = measure_apart(folder, args.messages)
        raw = raw_commit_ms(folder, synchronous="FULL")
    n = args.messages
    table = Table(
        "step",
        "SQL statements",
        "transactions",
        "durable commits",
        "log fsyncs",
        "memory store statements",
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
            f"{counts.memory[step] / n:.1f}",
            f"{counts.cpu_ms[step] / n:.2f}",
        )
    table.add_row(
        "total",
        f"{sum(counts.statements.values()) / n:.1f}",
        f"{sum(counts.transactions.values()) / n:.1f}",
        f"{sum(counts.durable.values()) / n:.1f}",
        f"{sum(counts.fsyncs.values()) / n:.1f}",
        f"{sum(counts.memory.values()) / n:.1f}",
        f"{sum(counts.cpu_ms.values()) / n:.2f}",
    )
    console = Console()
    console.print(table)
    cpu = sum(counts.cpu_ms.values()) / n
    console.print(
        f"CPU {cpu:.2f} ms per message against {baseline / n:.2f} ms for raw sqlite3 replaying the same statements,"
        f" transactions and fsyncs (baseline): {cpu / (baseline / n):.1f}×"
    )
    console.print(f"wall {wall / n * 1000:.2f} ms per message; a raw SQLite insert + durable commit {raw:.3f} ms")


if __name__ == "__main__":
    main()
