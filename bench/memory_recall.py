"""Memory recall speed: archiving, index build and FAIR-DRI selection at 1,000 and 10,000 folders.

Synthetic customer-service folders (orders, addresses, preferences, small talk) are archived
through the engine and scored by the heuristic scorer. Archive: `commit_archive` of them all
(tokenizing, index entries, postings), beside the raw SQLite floor of inserting the same
compressed bodies, and the store's size on disk. Build: `RecallIndex.build` for one
scope, beside the raw SQLite floor of reading and decompressing the same folder bodies.
Selection: the median and p99 of `select` over 200 queries, beside `RecallIndex.scores` (the
lexical matching alone). Goals of issue 7: selection under 5 ms median and build under 60 ms
at 10,000 folders.

    python -m bench.memory_recall [--sizes 1000 10000]
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import zstandard
from rich.console import Console
from rich.table import Table

from runtime.memory.folders import PlannedFolder
from runtime.memory.heuristic import score_backlog
from runtime.memory.recall import RecallIndex, RecallState, select
from runtime.memory.store import MemoryStore

CITIES = ["上海市浦东新区", "杭州市西湖区", "北京市朝阳区", "广州市天河区", "成都市武侯区"]
GOODS = ["四件套", "羽绒被", "枕芯", "床垫", "毛毯", "凉席"]
LINES = [
    "user: 订单{order}的{good}什么时候发货？\nassistant: 今天下午发出，走顺丰。\n",
    "user: 收货地址改成{city}{n}号。\nassistant: 好的，已经帮您改好了。\n",
    "user: 我喜欢{good}要纯棉的，以后都发纯棉。\nassistant: 记下了，以后优先纯棉款。\n",
    "user: 哈哈今天天气不错。\nassistant: 是呀，祝您心情愉快。\n",
    "user: {good}有{n}元的优惠券吗？\nassistant: 满{n}减20，下单自动用。\n",
]
QUERIES = ["订单什么时候发货", "地址改到哪里了", "我喜欢什么材质", "优惠券还能用吗", "四件套", "顺丰快递"]


def synthetic(n: int, seed: int = 7) -> list[PlannedFolder]:
    rng = random.Random(seed)
    folders = []
    for seq in range(1, n + 1):
        text = "".join(
            rng.choice(LINES).format(
                order=f"A{rng.randint(1000, 99999)}",
                good=rng.choice(GOODS),
                city=rng.choice(CITIES),
                n=rng.randint(1, 300),
            )
            for _ in range(rng.randint(2, 5))
        )
        folders.append(PlannedFolder(seq=seq, title=text[6:30], text=text, event_from=seq, event_to=seq))
    return folders


def raw_floor(path: Path, scope: str) -> float:
    db = sqlite3.connect(path)
    started = time.perf_counter()
    decompress = zstandard.ZstdDecompressor().decompress
    query = "SELECT t.body FROM folder f JOIN folder_text t ON t.folder_id = f.id WHERE f.scope = ?"
    for (body,) in db.execute(query, (scope,)):
        decompress(body)
    elapsed = time.perf_counter() - started
    db.close()
    return elapsed


def raw_insert(path: Path, folders: list[PlannedFolder]) -> float:
    """Seconds to insert the folders' compressed bodies into a bare table, in one transaction."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE body (id INTEGER PRIMARY KEY, data BLOB)")
    compress = zstandard.ZstdCompressor(level=3).compress
    started = time.perf_counter()
    with db:
        db.executemany("INSERT INTO body (data) VALUES (?)", ((compress(f.text.encode()),) for f in folders))
    elapsed = time.perf_counter() - started
    db.close()
    return elapsed


def measure(size: int, folder: Path) -> dict[str, float]:
    store = MemoryStore(folder / f"memory-{size}.sqlite")
    planned = synthetic(size)
    insert_floor = raw_insert(folder / f"raw-{size}.sqlite", planned)
    started = time.perf_counter()
    store.commit_archive("bench", f"plan-{size}", planned)
    archived = time.perf_counter() - started
    score_backlog(store, "bench")
    store_mb = sum(p.stat().st_size for p in folder.glob(f"memory-{size}.sqlite*")) / 1e6
    floor = min(raw_floor(store.path, "bench") for _ in range(3))
    builds = []
    for _ in range(3):
        started = time.perf_counter()
        index = RecallIndex.build(store, "bench")
        builds.append(time.perf_counter() - started)
    picks, scores = [], []
    state = RecallState()
    for i in range(200):
        query = QUERIES[i % len(QUERIES)]
        started = time.perf_counter()
        index.scores(query)
        scores.append(time.perf_counter() - started)
        started = time.perf_counter()
        _, state = select(index, query, state.model_copy(update={"block": []}))
        picks.append(time.perf_counter() - started)
    return {
        "archive_ms": archived * 1000,
        "insert_floor_ms": insert_floor * 1000,
        "store_mb": store_mb,
        "build_ms": min(builds) * 1000,
        "floor_ms": floor * 1000,
        "select_p50_ms": statistics.median(picks) * 1000,
        "select_p99_ms": sorted(picks)[int(len(picks) * 0.99) - 1] * 1000,
        "scores_p50_ms": statistics.median(scores) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    args = parser.parse_args()
    console = Console(width=max(Console().width, 140))
    table = Table(
        "folders",
        "archive ms",
        "raw insert ms",
        "archive / raw",
        "store MB",
        "build ms",
        "raw read+decompress ms",
        "build / raw",
        "select p50 ms",
        "select p99 ms",
        "lexical scores p50 ms",
        title="memory recall",
    )
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            m = measure(size, Path(tmp))
            table.add_row(
                f"{size:,}",
                f"{m['archive_ms']:.0f}",
                f"{m['insert_floor_ms']:.0f}",
                f"{m['archive_ms'] / m['insert_floor_ms']:.1f}x",
                f"{m['store_mb']:.1f}",
                f"{m['build_ms']:.1f}",
                f"{m['floor_ms']:.1f}",
                f"{m['build_ms'] / m['floor_ms']:.1f}x",
                f"{m['select_p50_ms']:.2f}",
                f"{m['select_p99_ms']:.2f}",
                f"{m['scores_p50_ms']:.2f}",
            )
    console.print(table)
    console.print("goals at 10,000 folders: select p50 < 5 ms, build < 60 ms")


if __name__ == "__main__":
    main()
