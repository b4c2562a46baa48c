"""Session-log append throughput, and agent-turn overhead excluding model time.

Appends: the same events written through SessionLog (zstd frame + fsync per flush) beside
raw appends of the same JSON-line bytes to a file with the same fsyncs, and beside zstd
compression of those frames alone, flushing every event and every turn (12 events).
Turn overhead: full `run_turn`, each on a fresh admitted batch, with the rules provider and
with the `openai` provider against a fake Chat Completions server on loopback that answers at
once; model time (the provider call, including HTTP for `openai`) is measured and subtracted.

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

from config import OpenAISettings, load_settings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.batches import evaluate
from runtime.admission.routes import RouteSpec, create_route
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.session_log import SESSION_EVENT, SessionLog, event_line
from runtime.agent.turn import run_turn
from runtime.inbound.ingest import ingest_page
from runtime.ports import ModelProvider
from runtime.store import DeliveryStore
from tests.fakes.openai_server import FakeOpenAI
from transports.llm.openai import OpenAIChatProvider
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
        out.append(event_line(SESSION_EVENT.validate_python({"seq": seq, "type": type_, "at": 0, **data})).encode())
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


class Timed:
    """Wraps a provider and adds up the time spent in it."""

    def __init__(self, provider: ModelProvider) -> None:
        self.provider, self.name, self.seconds = provider, provider.name, 0.0

    def complete(self, messages, tools):  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        try:
            return self.provider.complete(messages, tools)
        finally:
            self.seconds += time.perf_counter() - began


def turn_overhead(folder: Path, turns: int, provider: Timed) -> float:
    """Seconds of `run_turn` outside the model, over `turns` turns."""
    settings = load_settings(data_dir=folder)
    store = DeliveryStore(settings.delivery_path)
    create_account(store, AccountSpec(id="shop", platform="simulator", identity="bench"))
    create_route(store, RouteSpec(id="all", account_id="shop", conversation_type="direct"), op_id="bench-route")
    platform = SimulatedPlatform(settings.simulator_path)
    transport = SimulatorTransport(platform)
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
    return total - provider.seconds


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
        rules = Timed(RulesProvider(load_knowledge(None)))
        rules_overhead = turn_overhead(folder / "rules", args.turns, rules)
        with FakeOpenAI() as fake:
            endpoint = OpenAISettings(base_url=fake.base_url, api_key="sk-bench", model="fake")
            llm = Timed(OpenAIChatProvider(endpoint))
            llm_overhead = turn_overhead(folder / "openai", args.turns, llm)
    console = Console()
    console.print(table)
    turns = Table("provider", "turn overhead ms (excl. model)", "model call ms per turn", title=f"{args.turns} turns")
    for name, overhead, provider in [("rules", rules_overhead, rules), ("openai (fake, instant)", llm_overhead, llm)]:
        turns.add_row(name, f"{overhead / args.turns * 1000:.2f}", f"{provider.seconds / args.turns * 1000:.2f}")
    console.print(turns)


if __name__ == "__main__":
    main()
