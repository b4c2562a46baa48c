"""`kefu demo`: three simulated buyers talk to the shop through a real worker on the embedded
broker; the verdict line is computed from the delivery store and the platform's ledger."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

from rich.console import Console

from config import Settings, load_settings
from runtime.accounts import AccountSpec, create_account
from runtime.memory.report import report as memory_report
from runtime.memory.store import MemoryStore
from runtime.routes import RouteSpec, create_route
from runtime.status import is_quiet
from runtime.store import DeliveryStore
from transports.simulator import SimulatedPlatform, SimulatorTransport
from worker.audit import Audit, audit
from worker.celery_app import make_app
from worker.dispatch import receive_page
from worker.process import WorkerProcess

ACCOUNT = "demo-shop"
BUYERS = {"b1": "张三", "b2": "李四", "b3": "王五"}
# (buyer, texts sent back to back before waiting for the reply)
SCRIPT: list[tuple[str, list[str]]] = [
    ("b1", ["你好，在吗？"]),
    ("b2", ["这款四件套是什么材质的？"]),
    ("b1", ["今天下单什么时候发货？", "发什么快递？"]),
    ("b3", ["我收到的枕套有破损"]),
    ("b2", ["有优惠券吗"]),
    ("b3", ["那可以退货吗？"]),
    ("b1", ["可以开发票吗"]),
    ("b2", ["能用花呗分期吗？"]),
    ("b3", ["好的，谢谢"]),
    ("b2", ["好的，谢谢"]),
    # 张三 comes back: with a small context window his oldest turns are archived into memory,
    # and the last question recalls them into the agent's system prompt.
    ("b1", ["订单A10086的收货地址是杭州市西湖区文三路100号，以后都发顺丰"]),
    ("b1", ["枕套是什么面料的？"]),
    ("b1", ["之前问的快递，改发顺丰要补多少运费？"]),
]


def demo_dir(data_dir: Path | None) -> Path:
    """Where a demo run keeps its data: the given folder, else a fresh one under KEFU_DATA_DIR."""
    return (data_dir or load_settings().data_dir / f"demo-{datetime.now():%Y%m%d-%H%M%S}").resolve()


def demo_settings(data_dir: Path) -> Settings:
    return load_settings(data_dir=data_dir, broker_url="embedded")


def run_demo(data_dir: Path, console: Console) -> Audit:
    env = {
        "KEFU_DATA_DIR": str(data_dir),
        "KEFU_BROKER_URL": "embedded",
        "KEFU_RECONCILE__INTERVAL_S": "2",
        "KEFU_RECONCILE__GRACE_S": "5",
    }
    settings = demo_settings(data_dir)
    store = DeliveryStore(settings.delivery_path, settings.delivery)
    create_account(store, AccountSpec(id=ACCOUNT, platform="simulator", identity="demo-shop-seller"))
    create_route(store, RouteSpec(id="demo-all-direct", account_id=ACCOUNT, conversation_type="direct"), "demo-route")
    platform = SimulatedPlatform(settings.simulator_path)
    transport = SimulatorTransport(platform)
    app = make_app(settings)
    setup = "embedded broker · simulator transport · rules agent"
    console.print(f"[dim]data dir {data_dir} · {setup}[/dim]", soft_wrap=True)
    worker = WorkerProcess(env, data_dir / "worker.log", listen=True).start()
    try:
        worker.wait_ready(app)
        seen_sends = 0
        first_page = None
        for buyer_id, texts in SCRIPT:
            for text in texts:  # the worker's listener picks them up from the platform
                message = platform.buyer_says(ACCOUNT, buyer_id, BUYERS[buyer_id], text)
                first_page = first_page or transport.page_of(ACCOUNT, [message])
                console.print(f"[bold cyan]{BUYERS[buyer_id]}[/] ▸ {text}", soft_wrap=True)
            # The platform redelivers the first message (a late ACK): it must not be answered again.
            assert first_page is not None  # every entry of SCRIPT says something
            receive_page(app, first_page)
            _wait_answered(store, platform)
            seen_sends = _print_replies(platform, seen_sends, console)
        _wait_scored(settings)
    finally:
        worker.stop()
    _print_memory(settings, console)
    here = f"KEFU_DATA_DIR={data_dir}"
    console.print(
        f"[dim]inspect: {here} kefu customers --source simulation · {here} kefu history 1[/dim]", soft_wrap=True
    )
    console.print(
        f"[dim]console: {here} kefu operators add NAME, then {here} kefu console"
        " (or next time `kefu demo --console`)[/dim]",
        soft_wrap=True,
    )
    return audit(store, platform, ACCOUNT)


def _print_memory(settings: Settings, console: Console) -> None:
    """What the memory engine did (it archives only when the context window is small enough
    to fill, e.g. KEFU_AGENT__CONTEXT_WINDOW_TOKENS=1000 KEFU_MEMORY__ALLOW_SMALL_WINDOW=true)."""
    if not settings.memory_path.exists():
        return
    rows = memory_report(settings.memory_path)
    for row in rows:
        console.print(
            f"memory {row.scope}: {row.folders} folders archived, {row.heuristic} scored by the heuristic,"
            f" {row.recalls} recalled into the system prompt",
            highlight=False,
        )
    if rows:
        console.print(f"[dim]inspect: KEFU_DATA_DIR={settings.data_dir} kefu memory show[/dim]", soft_wrap=True)


def _wait_answered(store: DeliveryStore, platform: SimulatedPlatform, timeout_s: float = 20) -> None:
    """Until every buyer message so far is answered and nothing is in flight (or time is up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = audit(store, platform, ACCOUNT)
        if result.answered == result.buyer_messages and is_quiet(store):
            return
        time.sleep(0.05)


def _wait_scored(settings: Settings, timeout_s: float = 10) -> None:
    """Until the memory task has scored every archived folder (or time is up)."""
    if not settings.memory_path.exists():
        return  # nothing was archived
    store = MemoryStore(settings.memory_path)
    deadline = time.monotonic() + timeout_s
    while store.pending() and time.monotonic() < deadline:
        time.sleep(0.1)


def _print_replies(platform: SimulatedPlatform, seen: int, console: Console) -> int:
    sends = platform.received(ACCOUNT)
    for send in sends[seen:]:
        name = BUYERS.get(send.recipient_id or "", send.recipient_id)
        for i, line in enumerate(send.text.splitlines()):
            lead = f"    [green]客服 → {name}[/] ◂ " if i == 0 else "                   "
            console.print(lead + line, soft_wrap=True)
    return len(sends)
