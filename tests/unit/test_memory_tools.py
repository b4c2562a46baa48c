"""The memory tools as the model calls them: `memory_recall` pages, time windows and event
states; `memory_judge` through the tool boundary; `memory_image`; and the self-check."""

from __future__ import annotations

import json
import marshal
import sqlite3
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from config import MemorySettings
from runtime.agent.tools import ToolOutcome, TurnBinding, execute
from runtime.memory.engine import MemoryEngine
from runtime.memory.folders import PlannedFolder
from runtime.memory.judge import judge
from runtime.memory.recall import load_state
from runtime.memory.selfcheck import selfcheck
from runtime.memory.store import MemoryStore
from runtime.memory.tools import MEMORY_TOOLS, match_event
from runtime.ports import ToolCall

ZONE = ZoneInfo("Asia/Shanghai")
SCOPE = "customer-1"


def at(day: str, hour: int = 12) -> int:
    return int(datetime.fromisoformat(f"{day}T{hour:02d}:00").replace(tzinfo=ZONE).timestamp() * 1000)


# (text, day, event)
FOLDERS = [
    ("user: 订单A1001的四件套什么时候发货？\nassistant: 今天发顺丰。\n", "2025-03-03", "四件套订单"),
    ("user: 订单A1001改地址到杭州市西湖区。\nassistant: 已改好。\n", "2025-03-04", "四件套订单"),
    ("user: 我喜欢纯棉的，以后都发纯棉。\nassistant: 记下了。\n", "2025-03-20", None),
    ("user: 羽绒被订单A2002双十一预售付尾款。\nassistant: 已登记。\n", "2025-06-10", "双十一预售"),
    ("user: 羽绒被订单A2002双十二预售到账了吗？\nassistant: 明天到账。\n", "2025-06-12", "双十二预售"),
    ("user: 订单A3003的枕芯发货了吗？\nassistant: 已发出。\n", "2025-08-01", None),
    ("user: 订单A4004的毛毯什么时候到？\nassistant: 后天到。\n", "2025-08-02", None),
]


@pytest.fixture
def memory(tmp_path: Path) -> MemoryEngine:
    store = MemoryStore(tmp_path / "var" / "memory-default.sqlite")
    planned = [
        PlannedFolder(seq=n, title=text[6:20], text=text, event_from=at(day), event_to=at(day, 13))
        for n, (text, day, _) in enumerate(FOLDERS, 1)
    ]
    folders = store.commit_archive(SCOPE, "plan-1", planned)
    updates = [
        {"id": f.id, "alpha": 0.5, "beta": 1, "keywords": ["记录", "客服", f"k{n}"]}
        | ({"event": event} if event else {})
        for n, (f, (_, _, event)) in enumerate(zip(folders, FOLDERS, strict=True))
    ]
    judge(store, SCOPE, {"updates": updates})
    return MemoryEngine(store, MemorySettings(), 100_000, ZONE, model_scores=True, images_dir=tmp_path / "images")


def turn(memory: MemoryEngine) -> TurnBinding:
    """A turn's binding of customer 1's memory (what the memory tools read of it)."""
    binding = TurnBinding(
        store=None,  # type: ignore[arg-type]
        customer=None,  # type: ignore[arg-type]
        batch=None,  # type: ignore[arg-type]
        session_id="s1",
        account_revision=0,
        zone=ZONE,
    )
    binding.memory = memory.session(1)
    return binding


def call(memory: MemoryEngine, name: str, arguments: str | dict[str, Any]) -> str:
    binding = turn(memory)
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return execute(binding, ToolCall(id="c1", name=name, arguments=raw), MEMORY_TOOLS).content


def ids(result: str) -> list[str]:
    return [line.split('"')[1] for line in result.splitlines() if line.startswith("<memory id=")]


def test_pages_are_stable_disjoint_and_never_advance_the_lanes(memory: MemoryEngine) -> None:
    pages = [call(memory, "memory_recall", {"keywords": "订单", "limit": 2, "offset": o}) for o in (0, 2, 4, 6)]
    found = [ids(page) for page in pages]
    flat = [i for page in found for i in page]
    assert len(flat) == len(set(flat)) == 6  # the six folders that say 订单, none twice
    assert "offset=2" in pages[0] and "(no more results)" in pages[2]
    assert call(memory, "memory_recall", {"keywords": "订单", "limit": 2, "offset": 2}) == pages[1]
    assert load_state(memory.store, SCOPE).round == 0  # a lookup, not a recall decision


def test_a_day_widens_to_three_days_and_an_explicit_range_is_hard(memory: MemoryEngine) -> None:
    widened = call(memory, "memory_recall", {"keywords": "订单", "timeFrom": "2025-03-05"})
    assert "(day3)" in widened and len(ids(widened)) == 1  # 03-04 only: 03-03 is outside ±1 day
    monthly = call(memory, "memory_recall", {"keywords": "羽绒被", "timeFrom": "2025-06-20"})
    assert "(month)" in monthly and len(ids(monthly)) == 2
    hard = call(memory, "memory_recall", {"keywords": "羽绒被", "timeFrom": "2025-07-01", "timeTo": "2025-07-31"})
    assert ids(hard) == [] and "No archived memory matches" in hard
    browse = call(memory, "memory_recall", {"timeFrom": "2025-08-01", "timeTo": "2025-08-02", "limit": 8})
    assert len(ids(browse)) == 2  # no keywords: browse the time range


def test_event_states_exact_ambiguous_unknown(memory: MemoryEngine) -> None:
    labels = memory.store.events(SCOPE)
    assert match_event("四件套订单", labels).state == "exact"
    assert match_event("空", labels).state == "none"
    assert match_event("冰箱维修", labels).state == "unknown"
    ambiguous = match_event("双十预售", labels)  # 0.75 like both, which judge kept apart (0.67)
    assert ambiguous.state == "ambiguous" and set(ambiguous.candidates) == {"双十一预售", "双十二预售"}
    exact = call(memory, "memory_recall", {"keywords": "订单", "event": "四件套订单", "limit": 8})
    assert len(ids(exact)) == 2 and "event constrained" in exact
    asked = call(memory, "memory_recall", {"keywords": "订单", "event": "双十预售"})
    assert "ambiguous" in asked and ids(asked) == []
    assert "No memory carries an event" in call(memory, "memory_recall", {"keywords": "订单", "event": "冰箱维修"})


def test_judge_through_the_tool_boundary(memory: MemoryEngine) -> None:
    broken = call(memory, "memory_judge", '{"updates": [')
    assert broken.startswith("Error: arguments of memory_judge are not valid JSON")
    folder = memory.store.folders(SCOPE)[0]
    result = json.loads(
        call(
            memory,
            "memory_judge",
            {"updates": [{"id": folder.id, "alpha": 1.5, "beta": 3.14}, {"id": "mem-nope", "keep": True}]},
        )
    )
    assert result["updated"] == [folder.id] and result["rejected"][0]["id"] == "mem-nope"
    stored = memory.store.folder(folder.id)
    assert stored is not None
    assert (stored.alpha, stored.beta) == (1.0, 3.1)
    too_many = call(memory, "memory_judge", {"updates": [{"id": folder.id, "keep": True}] * 101})
    assert "KEFU_MEMORY_JUDGE_INVALID" in too_many


def test_selfcheck_passes_a_whole_store_and_fails_a_damaged_index(memory: MemoryEngine, tmp_path: Path) -> None:
    assert all(c.status == "PASS" for c in selfcheck(memory.store.path))
    db = sqlite3.connect(memory.store.path)
    with db:
        db.execute("UPDATE index_entry SET length = length + 1 WHERE rowid = 1")
        db.execute("UPDATE folder SET alpha = 0 WHERE rowid = 2")
    failed = {c.name for c in selfcheck(memory.store.path) if c.status == "FAIL"}
    assert failed == {"index entries match folders", "value ranges"}
    with db:
        db.execute("UPDATE scope_postings SET keywords = ?", (marshal.dumps({}),))
    failed = {c.name for c in selfcheck(memory.store.path) if c.status == "FAIL"}
    assert "postings match index entries" in failed
    db.close()
    assert memory.store.rebuild_index(SCOPE) == len(FOLDERS)  # what kefu.memory.rebuild_index runs
    failed = {c.name for c in selfcheck(memory.store.path) if c.status == "FAIL"}
    assert failed == {"value ranges"}  # the index is whole again; a bad score is not its business
    env = {"KEFU_DATA_DIR": str(tmp_path / "var"), "PATH": str(Path(sys.executable).parent)}
    run = subprocess.run(
        [str(Path(sys.executable).parent / "kefu"), "memory", "selfcheck"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1 and "FAIL value ranges: mem-plan-1-2" in run.stdout


def test_keyword_misses_in_a_row_hint_at_the_third_and_stop_the_tool_at_the_sixth(memory: MemoryEngine) -> None:
    binding = turn(memory)

    def search(arguments: dict[str, Any]) -> ToolOutcome:
        raw = json.dumps(arguments, ensure_ascii=False)
        return execute(binding, ToolCall(id="c1", name="memory_recall", arguments=raw), MEMORY_TOOLS)

    miss, hit = {"keywords": "潜水艇"}, {"keywords": "订单"}
    assert [search(miss).is_error for _ in range(2)] == [False, False]
    assert ids(search(hit).content)  # a match starts the count again
    assert "in a row" not in search(miss).content + search(miss).content
    assert search({"keywords": "订单", "limit": 99}).is_error  # no search made: neither a strike nor a reset
    assert "3 searches in a row" in search(miss).content
    timed = search({"keywords": "羽绒被", "timeFrom": "2025-07-01", "timeTo": "2025-07-31"})
    assert "widen the range" in timed.content and not timed.is_error  # the words matched: no strike
    search(miss), search(miss)
    sixth = search(miss)
    assert sixth.is_error and "off until the customer's next message" in sixth.content
    assert search(hit).is_error  # off for the rest of the turn, whatever the search
    binding = turn(memory)  # the customer's next message: a new turn
    assert ids(search(hit).content)
