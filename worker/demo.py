"""`kefu demo`: one scripted simulation batch (worker.simulation) through a real worker on the
embedded broker: three buyers and a group chat; the verdict line is computed from the delivery
store and the platform's ledger."""

from __future__ import annotations

import itertools
import math
import struct
import time
import zlib
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from config import Settings, load_settings
from runtime.memory.report import report as memory_report
from runtime.memory.store import MemoryStore
from runtime.operators.status import is_quiet
from runtime.store import DeliveryStore
from transports.simulator import SimulatedPlatform, SimulatorTransport
from transports.simulator.script import Script, ScriptedConversation, Step
from worker.audit import Audit, audit
from worker.celery_app import make_app
from worker.cli.common import _
from worker.dispatch import receive_page
from worker.simulation import Simulation, ensure_sample_shop, serving

ACCOUNT = "demo-shop"
# One scripted batch (worker.simulation): three buyers in direct conversations and a group chat
# where only the message that mentions the shop is answered; 王五 sends a photo. 张三 comes
# back two days later: with a small context window his oldest turns are archived into memory,
# and his last question recalls them into the agent's system prompt.
SCRIPT = {
    "start": "2026-03-03T09:00:00+08:00",
    "conversations": [
        {
            "name": "张三",
            "buyer": {"id": "b1", "name": "张三"},
            "steps": [
                {"say": "你好，在吗？"},
                {"say": "今天下单什么时候发货？", "wait": False},  # two lines back to back
                {"say": "发什么快递？"},
                {"say": "可以开发票吗"},
                {
                    "at": "2026-03-05T20:00:00+08:00",
                    "say": "订单A10086的收货地址是杭州市西湖区文三路100号，以后都发顺丰",
                },
                {"say": "枕套是什么面料的？"},
                {"say": "之前问的快递，改发顺丰要补多少运费？"},
            ],
        },
        {
            "name": "李四",
            "buyer": {"id": "b2", "name": "李四"},
            "steps": [
                {"say": "这款四件套是什么材质的？"},
                {"say": "有优惠吗"},
                {"say": "能用花呗分期吗？"},
                {"say": "好的，谢谢"},
            ],
        },
        {
            "name": "王五",
            "buyer": {"id": "b3", "name": "王五"},
            "steps": [
                {"say": "我收到的枕套有破损，拍了照片", "image": "pillowcase.png"},
                {"say": "那可以退货吗？"},
                {"say": "好的，谢谢"},
            ],
        },
        {
            "name": "团购群",
            "buyer": {"id": "b4", "name": "赵六"},
            "group": {"id": "g1", "title": "小满家居团购群"},
            "steps": [
                {"say": "这款有现货吗，大家买过吗"},  # not to the shop: no reply
                {"say": "@小满家居 满减优惠券怎么领？", "mention": True},
            ],
        },
    ],
}


# 王五's photo, drawn here (PNG by hand: zlib and struct, no imaging library): a pale blue
# pillowcase on a wooden table, a jagged tear circled in red. Large enough to see in the
# console, about 1 KB, the same bytes on every run.
_PHOTO_SIZE = (160, 120)
_CASE = (22, 22, 138, 98)  # left, top, right, bottom
_TEAR_PATH = [(92, 58), (98, 64), (103, 60), (109, 68), (114, 64), (121, 73)]
_RGB = {
    "table": (222, 204, 178),
    "grain": (208, 188, 160),
    "shadow": (188, 170, 146),
    "cloth": (214, 232, 247),
    "shade": (190, 212, 232),
    "edge": (96, 136, 176),
    "stitch": (150, 182, 212),
    "tear": (74, 58, 46),
    "fray": (236, 242, 248),
    "mark": (214, 48, 49),
}


def _to_segment(x: int, y: int, a: tuple[int, int], b: tuple[int, int]) -> float:
    (ax, ay), (bx, by) = a, b
    dx, dy = bx - ax, by - ay
    t = max(0.0, min(1.0, ((x - ax) * dx + (y - ay) * dy) / (dx * dx + dy * dy)))
    return math.hypot(x - ax - t * dx, y - ay - t * dy)


def _photo_pixel(x: int, y: int) -> str:
    left, top, right, bottom = _CASE
    if 0.93 < math.hypot((x - 106) / 24, (y - 65) / 17) < 1.07:
        return "mark"  # the buyer's circle around the tear
    if not (left <= x <= right and top <= y <= bottom):
        if left + 4 <= x <= right + 4 and top + 4 <= y <= bottom + 4:
            return "shadow"
        return "grain" if (y * 7 + x // 23) % 11 == 0 else "table"
    if min(x - left, right - x, y - top, bottom - y) < 2:
        return "edge"
    if x - left == 14 or (x - left > 14 and min(y - top, bottom - y) == 6 and x % 6 < 3):
        return "stitch"  # the opening's seam, and the stitching along the hems
    near = min(_to_segment(x, y, a, b) for a, b in itertools.pairwise(_TEAR_PATH))
    if near < 2.0:
        return "tear"
    if near < 3.0:
        return "fray"
    return "shade" if x - left < 14 or (x + y) % 19 == 0 else "cloth"


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def pillowcase_photo() -> bytes:
    """王五's photo as a PNG: 8-bit RGB, each row unfiltered."""
    width, height = _PHOTO_SIZE
    pixels = bytearray()
    for y in range(height):
        pixels.append(0)  # the row's filter: none
        for x in range(width):
            pixels += bytes(_RGB[_photo_pixel(x, y)])
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    body = _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", zlib.compress(bytes(pixels), 9))
    return b"\x89PNG\r\n\x1a\n" + body + _png_chunk(b"IEND", b"")


PHOTO = pillowcase_photo()


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
    ensure_sample_shop(store, ACCOUNT)
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "pillowcase.png").write_bytes(PHOTO)
    script = Script.model_validate(SCRIPT | {"folder": data_dir})
    platform = SimulatedPlatform(settings.simulator_path)
    simulation = Simulation(store, platform, ACCOUNT, script, run="", on_step=_printer(console))
    console.print(
        "[dim]"
        + _("data dir {path} · embedded broker · simulator transport · rules agent").format(path=data_dir)
        + "[/dim]",
        soft_wrap=True,
    )
    with serving(settings, env, data_dir / "worker.log", Console(quiet=True)):
        report = simulation.run_batch(concurrency=1)
        # The platform delivers the first message again (a late ACK): it must not be answered again.
        first = platform.buyer_messages(ACCOUNT, limit=1)
        receive_page(make_app(settings), SimulatorTransport(platform).page_of(ACCOUNT, first))
        _wait_quiet(store)
        _wait_scored(settings)
    for result in report.conversations:
        if result.error:
            console.print(f"[red]{result.name}: {result.error}[/red]")
    _print_memory(settings, console)
    here = f"KEFU_DATA_DIR={data_dir}"
    inspect = _("inspect: {command}").format(
        command=f"{here} kefu customers --source simulation · {here} kefu history 1"
    )
    console.print(f"[dim]{inspect}[/dim]", soft_wrap=True)
    console.print(
        "[dim]"
        + _("console: {add}, then {serve} (or next time `kefu demo --console`)").format(
            add=f"{here} kefu operators add NAME", serve=f"{here} kefu console"
        )
        + "[/dim]",
        soft_wrap=True,
    )
    return audit(store, platform, ACCOUNT)


def _printer(console: Console) -> Callable[[ScriptedConversation, Step, list[str]], None]:
    """Each step as it happens: what the buyer said, then the shop's replies."""

    def print_step(conversation: ScriptedConversation, step: Step, replies: list[str]) -> None:
        where = f"[{conversation.group.title}] " if conversation.group else ""
        shown = _("[image {name}]").format(name=step.image.name) if step.image else ""
        photo = f" [dim]{escape(shown)}[/dim]" if step.image else ""
        console.print(f"{where}[bold cyan]{conversation.buyer.name}[/] ▸ {step.say}{photo}", soft_wrap=True)
        to = conversation.group.title if conversation.group else conversation.buyer.name
        for reply in replies:
            for i, line in enumerate(reply.splitlines()):
                lead = "    [green]" + _("shop → {to}").format(to=to) + "[/] ◂ " if i == 0 else "                   "
                console.print(lead + line, soft_wrap=True)

    return print_step


def _print_memory(settings: Settings, console: Console) -> None:
    """What the memory engine did (it archives only when the context window is small enough
    to fill, e.g. KEFU_AGENT__CONTEXT_WINDOW_TOKENS=1000 KEFU_MEMORY__ALLOW_SMALL_WINDOW=true)."""
    if not settings.memory_path.exists():
        return
    rows = memory_report(settings.memory_path)
    for row in rows:
        console.print(
            _(
                "memory {scope}: {folders} folders archived, {heuristic} scored by the heuristic,"
                " {recalls} recalled into the system prompt"
            ).format(scope=row.scope, folders=row.folders, heuristic=row.heuristic, recalls=row.recalls),
            highlight=False,
        )
    if rows:
        inspect = _("inspect: {command}").format(command=f"KEFU_DATA_DIR={settings.data_dir} kefu memory show")
        console.print(f"[dim]{inspect}[/dim]", soft_wrap=True)


def _wait_quiet(store: DeliveryStore, timeout_s: float = 20) -> None:
    """Until nothing is in flight (the redelivered page, recorded before it was published, is
    ingested and found known), or time is up."""
    deadline = time.monotonic() + timeout_s
    while not is_quiet(store) and time.monotonic() < deadline:
        time.sleep(0.05)


def _wait_scored(settings: Settings, timeout_s: float = 10) -> None:
    """Until the memory task has scored every archived folder (or time is up)."""
    if not settings.memory_path.exists():
        return  # nothing was archived
    store = MemoryStore(settings.memory_path)
    deadline = time.monotonic() + timeout_s
    while store.pending() and time.monotonic() < deadline:
        time.sleep(0.1)
