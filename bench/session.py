"""Session-log append throughput, and agent-turn overhead excluding model time.

Appends: the same events written through SessionLog (zstd frame + fsync per flush) beside
raw appends of the same JSON-line bytes to a file with the same fsyncs, and beside zstd
compression of those frames alone, flushing every event and every turn (12 events).
Turn overhead: full `run_turn` with the rules provider (model time ~0, measured and
subtracted), each turn on a fresh admitted batch.

    python -m bench.session [--events 6000] [--turns 300]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import zstandard
from rich.console import Console
from rich.table import Table

from config import load_settings
from runtime.accounts import AccountSpec, DirectRouteSpec, create_account, create_direct_route
from runtime.admission import evaluate
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.turn import run_turn
from runtime.ingest import ingest_page
from runtime.session_log import SessionEvent, SessionLog
from runtime.store import DeliveryStore
from transports.simulator import SimulatedPlatform, SimulatorTransport

TURN = [
    ("turn/start", {"turn": "t", "batch_id": "b1-1", "kind": "batch"}),
    ("user/message", {"source": "b1-1", "text": "[2026-11-30 14:05] [counterpart 张三] 这个什么时候发货？" * 2}),
    ("step/start", {"turn": "t", "step": 0}),
    (
        "assistant/message",
        {
            "text": "",
            "tool_calls": [
                {"id": "c1", "name": "im_send_message", "arguments": '{"text": "现货商品在付款后48小时内发货。"}'}
            ],
        },
    ),
    ("tool/call", {"call_id": "c1", "name": "im_send_message"}),
    (
        "tool/result",
        {
            "call_id": "c1",
            "name": "im_send_message",
            "content": "Queued for delivery: request auto-0123456789abcdef01234567, status pending.",
        },
    ),
    ("step/end", {"turn": "t", "step": 0}),
    ("step/start", {"turn": "t", "step": 1}),
    ("assistant/message", {"text": "已回复顾客。", "tool_calls": []}),
    ("step/end", {"turn": "t", "step": 1}),
    ("turn/end", {"turn": "t", "outcome": "complete"}),
    ("system/message", {"text": "[memory] 3 earlier segments archived"}),
]


def lines(events: int) -> list[bytes]:
    out = []
    for seq in range(events):
        type_, data = TURN[seq % len(TURN)]
        out.append((SessionEvent(seq=seq, type=type_, at=0, **data).model_dump_json() + "\n").encode())
    return out


def kefu_log(folder: Path, events: int, per_flush: int) -> float:
    log = SessionLog(folder / f"kefu-{per_flush}.jsonl.zst")
    began = time.perf_counter()
    for seq in range(events):
        type_, data = TURN[seq % len(TURN)]
        log.append(type_, **data)
        if (seq + 1) % per_flush == 0:
            log.flush()
    log.flush()
    return time.perf_counter() - began


def raw_file(folder: Path, payload: list[bytes], per_flush: int) -> float:
    began = time.perf_counter()
    with open(folder / f"raw-{per_flush}.jsonl", "ab") as handle:
        for start in range(0, len(payload), per_flush):
            handle.write(b"".join(payload[start : start + per_flush]))
            handle.flush()
            os.fsync(handle.fileno())
    return time.perf_counter() - began


def zstd_only(payload: list[bytes], per_flush: int) -> float:
    compressor = zstandard.ZstdCompressor(level=3, write_checksum=True, write_content_size=True)
    began = time.perf_counter()
    for start in range(0, len(payload), per_flush):
        compressor.compress(b"".join(payload[start : start + per_flush]))
    return time.perf_counter() - began


class TimedRules(RulesProvider):
    model_seconds = 0.0

    def complete(self, messages, tools):  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        try:
            return super().complete(messages, tools)
        finally:
            TimedRules.model_seconds += time.perf_counter() - began


def turn_overhead(folder: Path, turns: int) -> tuple[float, float]:
    settings = load_settings(data_dir=folder / "var")
    store = DeliveryStore(settings.delivery_path)
    create_account(store, AccountSpec(id="shop", platform="simulator", identity="bench"))
    create_direct_route(store, DirectRouteSpec(id="all", account_id="shop"))
    platform = SimulatedPlatform(settings.simulator_path)
    transport = SimulatorTransport(platform)
    provider = TimedRules(load_knowledge(None))
    customers = []
    for i in range(turns):
        page = transport.page_of("shop", [platform.buyer_says("shop", f"b{i}", "买家", "什么时候发货？")])
        customer = ingest_page(store, page).customer_ids[0]
        customers.append(customer)
    total = 0.0
    for customer in customers:
        evaluate(store, customer, 1000)
        began = time.perf_counter()
        result = run_turn(store, provider, customer, settings.sessions_dir, settings.zone, settings.agent)
        total += time.perf_counter() - began
        assert result is not None and result.outcome == "complete"
    return total, TimedRules.model_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=6000)
    parser.add_argument("--turns", type=int, default=300)
    args = parser.parse_args()
    payload = lines(args.events)
    table = Table("flush", "path", "events/s", "kefu / this", title=f"session log: {args.events:,} events")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for label, per_flush in [("every event", 1), (f"every turn ({len(TURN)} events)", len(TURN))]:
            raw = raw_file(folder, payload, per_flush)
            zstd = zstd_only(payload, per_flush)
            kefu = kefu_log(folder, args.events, per_flush)
            for name, seconds in [
                ("raw append + fsync (baseline)", raw),
                ("zstd compression alone", zstd),
                ("kefu SessionLog append + flush", kefu),
            ]:
                table.add_row(label, name, f"{args.events / seconds:,.0f}", f"{seconds / kefu:.1%}")
        turn_total, model = turn_overhead(folder, args.turns)
    console = Console()
    console.print(table)
    overhead_ms = (turn_total - model) / args.turns * 1000
    print(
        f"agent turn overhead excluding model time (rules provider, {args.turns} turns): {overhead_ms:.2f} ms per turn"
    )
    print(f"model time per turn: {model / args.turns * 1000:.3f} ms")


if __name__ == "__main__":
    main()
