"""The cost of erasing one buyer (`kefu customers erase`), with 10,000 messages of theirs.

A data dir is built once through kefu's own paths: the buyer's messages in pages of 100 (each
page also carries another buyer's 100, so the erasure finds its rows among others), a batch
admitted per page, a reply registered per 10 messages, a session log of their turns, a memory
scope with archived folders. Each run copies the data dir and times, on the copy: the dry run
(`plan_erasure`), then the erasure (`erase_customer`: rows, kept pages, tombstone, files, memory,
secure delete and checkpoints). The baseline, in the same run on a copy: raw SQLite deleting the
buyer's message rows in one transaction, the least any erasure must do.

    python -m bench.erasure [--messages 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from config import load_settings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.batches import evaluate
from runtime.admission.routes import RouteSpec, create_route
from runtime.agent.session_log import SessionLog
from runtime.agent.sessions import session_path
from runtime.customers.erasure import erase_customer, plan_erasure
from runtime.inbound.ingest import ingest_page
from runtime.memory.engine import scope_of
from runtime.memory.folders import ArchivedMessage, plan_folders
from runtime.memory.store import MemoryStore
from runtime.outbox.requests import register_outbound
from runtime.store import DeliveryStore
from runtime.store.tables import OutboundIntent
from transports.simulator import SimulatedPlatform, SimulatorTransport

PAGE = 100
ACCOUNT = "shop"


def build(data_dir: Path, messages: int) -> int:
    """The data dir with the buyer to erase: their customer id."""
    settings = load_settings(data_dir=data_dir)
    store = DeliveryStore(settings.delivery_path, settings.delivery)
    create_account(store, AccountSpec(id=ACCOUNT, platform="simulator", identity="seller-1"))
    create_route(store, RouteSpec(id="direct", account_id=ACCOUNT, conversation_type="direct"), op_id="op")
    platform = SimulatedPlatform(settings.simulator_path)
    transport = SimulatorTransport(platform)
    customer = 0
    for first in range(0, messages, PAGE):
        numbers = range(first, first + PAGE)
        said = [platform.buyer_says(ACCOUNT, "b1", "张三", f"订单{n}什么时候发货？") for n in numbers]
        said += [platform.buyer_says(ACCOUNT, "b2", "李四", f"第{n}句") for n in numbers]
        customer = ingest_page(store, transport.page_of(ACCOUNT, said)).customer_ids[0]
        decision = evaluate(store, customer, PAGE)
        with store.write() as conn:
            for n in range(first, first + PAGE, 10):
                intent = OutboundIntent(
                    request_id=f"auto-{n}",
                    customer_id=customer,
                    account_id=ACCOUNT,
                    conversation_id="b1",
                    recipient_id="b1",
                    origin="auto",
                    body=f"订单{n}今天发货。",
                    batch_id=decision.batch_id,
                )
                register_outbound(conn, intent)
    log = SessionLog(session_path(settings.sessions_dir, f"s{customer}-1"))
    log.load()
    for n in range(0, messages, 10):
        log.append("user/message", source=f"b{n}", text=f"[2026-03-03 09:00] [counterpart 张三] 订单{n}什么时候发货？")
    log.flush()
    memory = MemoryStore(settings.memory_path)
    for n in range(0, messages, 1000):
        said = [ArchivedMessage(role="user", text=f"订单{m}什么时候发货？", at_ms=m) for m in range(n, n + 1000, 50)]
        memory.commit_archive(scope_of(customer), f"plan-{n}", plan_folders(said))
    memory.close()
    store.close()
    return customer


def timed_erasure(template: Path, run: Path, customer: int) -> tuple[float, float, int]:
    shutil.copytree(template, run)
    settings = load_settings(data_dir=run)
    store = DeliveryStore(settings.delivery_path, settings.delivery)
    memory = MemoryStore(settings.memory_path)
    began = time.perf_counter()
    plan = plan_erasure(store, memory, settings.sessions_dir, settings.memory_images_dir, customer)
    planned = time.perf_counter()
    report = erase_customer(store, memory, settings.sessions_dir, settings.memory_images_dir, customer, "bench")
    done = time.perf_counter()
    assert report.counts.messages == plan.counts.messages
    memory.close()
    store.close()
    return planned - began, done - planned, report.counts.messages


def timed_raw_delete(template: Path, run: Path, customer: int) -> float:
    shutil.copytree(template, run)
    db = sqlite3.connect(load_settings(data_dir=run).delivery_path, isolation_level=None)
    began = time.perf_counter()
    db.execute("BEGIN IMMEDIATE")
    db.execute("DELETE FROM inbound_message WHERE customer_id = ?", (customer,))
    db.execute("COMMIT")
    elapsed = time.perf_counter() - began
    db.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        began = time.perf_counter()
        customer = build(root / "template", args.messages)
        built_s = time.perf_counter() - began
        print(f"built {args.messages} messages of the buyer (and as many of another's) in {built_s:.1f} s")
        plans, erasures, raws = [], [], []
        for n in range(args.repeat):
            plan_s, erase_s, erased = timed_erasure(root / "template", root / f"erase-{n}", customer)
            plans.append(plan_s)
            erasures.append(erase_s)
            raws.append(timed_raw_delete(root / "template", root / f"raw-{n}", customer))
    table = Table(title=f"erasing one buyer with {erased} messages (median of {args.repeat})")
    table.add_column("path")
    table.add_column("ms", justify="right")
    for name, values in (
        ("kefu dry run (plan_erasure)", plans),
        ("kefu erasure (erase_customer)", erasures),
        ("raw SQLite: DELETE the message rows", raws),
    ):
        table.add_row(name, f"{statistics.median(values) * 1000:.1f}")
    Console().print(table)
    print(f"ratio kefu erasure / raw message delete: {statistics.median(erasures) / statistics.median(raws):.1f}x")


if __name__ == "__main__":
    main()
