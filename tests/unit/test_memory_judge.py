"""`memory_judge`: per-item validation, clamping, category keywords, event normalisation and
merging; and the heuristic scorer that goes through the same rules."""

from __future__ import annotations

import pytest

from runtime.errors import KefuError
from runtime.memory.folders import ArchivedMessage, plan_folders
from runtime.memory.heuristic import score_pending
from runtime.memory.judge import judge, normalize_event
from runtime.memory.store import MemoryStore

TEXTS = ["我喜欢顺丰快递，以后都发顺丰", "订单A1024的收货地址是上海市浦东新区", "哈哈今天天气不错", "好的谢谢"]


@pytest.fixture
def memory(tmp_path) -> tuple[MemoryStore, list[str]]:
    store = MemoryStore(tmp_path / "memory.sqlite")
    messages = [ArchivedMessage(role="user", text=t, at_ms=n) for n, t in enumerate(TEXTS)]
    folders = store.commit_archive("c1", "p1", plan_folders(messages, target_chars=10))
    store.commit_archive("c2", "p2", plan_folders([ArchivedMessage(role="user", text="别人的", at_ms=1)]))
    return store, [f.id for f in folders]


def test_each_update_is_validated_on_its_own(memory):
    store, ids = memory
    other = store.folders("c2")[0].id
    result = judge(
        store,
        "c1",
        {
            "updates": [
                {"id": ids[0], "alpha": 1.7, "beta": -12.34, "keywords": ["顺丰", "快递", "Shipping "]},
                {"id": ids[1], "alpha": 0.5, "beta": 1},  # pending: keywords missing
                {"id": ids[2], "alpha": 0.3, "beta": 0, "keywords": ["天气", "天气"]},  # 1 distinct keyword
                {"id": "mem-nope", "keep": True},
                {"id": other, "keep": True},  # another customer's folder
                {"id": ids[3], "alpha": "high"},
                {"id": ids[1], "keep": True},
            ]
        },
    )
    assert result.updated == [ids[0]] and result.kept == [ids[1]]
    assert [(r.id, r.reason) for r in result.rejected] == [
        (ids[1], "a new memory needs alpha, beta and keywords"),
        (ids[2], "keywords: 3 to 8 distinct words needed"),
        ("mem-nope", "unknown folder id"),
        (other, "unknown folder id"),
        (ids[3], "invalid alpha"),
    ]
    scored = store.folder(ids[0])
    assert (scored.alpha, scored.beta, scored.scored, scored.score_source) == (1.0, -10.0, True, "llm")
    # High alpha and a preference in the text: the category keyword is added; α above 0.8 warns.
    assert scored.keywords == ["顺丰", "快递", "shipping", "喜好"]
    assert any("category-keyword-added" in w for w in result.warnings)
    assert any("above 0.8" in w for w in result.warnings)


def test_clamping_rounds_alpha_to_4_and_beta_to_1_decimal(memory):
    store, ids = memory
    judge(store, "c1", {"updates": [{"id": ids[1], "alpha": 0.123456, "beta": 3.26, "keywords": ["a1", "b2", "c3"]}]})
    assert (store.folder(ids[1]).alpha, store.folder(ids[1]).beta) == (0.1235, 3.3)
    judge(store, "c1", {"updates": [{"id": ids[1], "alpha": 0.0}]})  # scored: alpha alone may change
    assert store.folder(ids[1]).alpha == 0.01


def test_a_call_that_is_not_a_list_or_too_long_is_refused_whole(memory):
    store, ids = memory
    for call in ({"updates": "all"}, [], {"updates": [{"id": ids[0], "keep": True}] * 101}):
        with pytest.raises(KefuError, match="KEFU_MEMORY_JUDGE_INVALID"):
            judge(store, "c1", call)


def test_event_labels_are_normalised_and_merged_into_a_similar_existing_label(memory):
    store, ids = memory
    keywords = ["w1", "w2", "w3"]
    batch = [
        {"id": ids[0], "alpha": 0.5, "beta": 0, "keywords": keywords, "event": " 「日本旅行」 "},
        {"id": ids[1], "alpha": 0.5, "beta": 0, "keywords": keywords, "event": "日本旅行计划"},  # Dice 0.78
        {"id": ids[2], "alpha": 0.5, "beta": 0, "keywords": keywords, "event": "登录重构项目"},
        {"id": ids[3], "alpha": 0.5, "beta": 0, "keywords": keywords, "event": "空"},
    ]
    result = judge(store, "c1", {"updates": batch})
    assert [store.folder(i).event for i in ids] == ["日本旅行", "日本旅行", "登录重构项目", None]
    assert any("merged into the existing “日本旅行”" in w for w in result.warnings)
    assert normalize_event("  Login   Refactor ") == "login refactor" and normalize_event("none") is None


def test_the_heuristic_scores_every_pending_folder_within_the_rules(memory):
    store, ids = memory
    result = score_pending(store, "c1")
    assert result.updated == ids and result.rejected == []
    folders = [store.folder(i) for i in ids]
    assert [f.alpha for f in folders] == [0.7, 0.5, 0.2, 0.2]
    assert all(3 <= len(f.keywords) <= 8 and f.score_source == "heuristic" and f.scored for f in folders)
    assert "喜好" in folders[0].keywords and "顺丰" in folders[0].keywords
    assert score_pending(store, "c1").updated == []  # nothing pending any more


def test_a_batch_judged_by_rote_gets_quality_warnings_and_a_careful_one_none(memory):
    store, ids = memory
    rote = [{"id": i, "alpha": 0.5, "beta": 1, "keywords": ["客服", "对话", "记录"]} for i in ids]
    warnings = judge(store, "c1", {"updates": rote}).warnings
    assert [w.split(";")[0] for w in warnings if w.startswith("quality")] == [
        "quality: 75% of the keywords repeat across memories",
        "quality: every memory of the batch got the same α",
        "quality: every memory of the batch got the same β",
        "quality: 4 of 4 memories have no reason",
    ]
    careful = [
        {
            "id": ids[0],
            "alpha": 0.8,
            "beta": 3,
            "keywords": ["顺丰", "快递", "偏好"],
            "reason": "a standing preference",
        },
        {"id": ids[1], "alpha": 0.6, "beta": 5, "keywords": ["订单", "地址", "上海"], "reason": "where to ship"},
        {"id": ids[2], "alpha": 0.1, "beta": 0, "keywords": ["天气", "闲聊", "寒暄"], "reason": "small talk"},
    ]
    assert not [w for w in judge(store, "c1", {"updates": careful}).warnings if w.startswith("quality")]
    messages = [ArchivedMessage(role="user", text=t, at_ms=n) for n, t in enumerate(TEXTS)]
    store.commit_archive("c3", "p3", plan_folders(messages, target_chars=10))
    heuristic = score_pending(store, "c3")  # β 0 for all, no reasons: by design, so no warning
    assert len(heuristic.updated) == 4 and not [w for w in heuristic.warnings if w.startswith("quality")]


def test_the_scoring_task_lists_the_newest_pending_first_and_leaves_room_for_reviews(tmp_path):
    import re
    import time
    from zoneinfo import ZoneInfo

    from config import MemorySettings
    from runtime.memory.engine import MemoryEngine, judge_task

    store = MemoryStore(tmp_path / "memory.sqlite")
    made = []
    for plan in range(3):  # three archives, one after the other
        messages = [ArchivedMessage(role="user", text=f"第{plan}次归档的第{n}条", at_ms=n) for n in range(4)]
        made += store.commit_archive("customer-1", f"p{plan}", plan_folders(messages, target_chars=5))
        time.sleep(0.002)  # archives of different milliseconds
    settings = MemorySettings(judge_task_items=5)
    engine = MemoryEngine(store, settings, 100_000, ZoneInfo("Asia/Shanghai"), model_scores=True)
    listed = re.findall(r"待评分 id=(\S+)", judge_task(engine.session(1)))
    newest = sorted(made, key=lambda f: (f.created_at, f.seq), reverse=True)
    assert listed == [f.id for f in newest[:5]]
    judge(
        store, "customer-1", {"updates": [{"id": made[0].id, "alpha": 0.5, "beta": 1, "keywords": ["一", "二", "三"]}]}
    )
    store.mark_review([made[0].id])
    task = judge_task(engine.session(1))
    assert len(re.findall(r"待评分 id=", task)) == 3 and f"复核 id={made[0].id}" in task  # 60% of 5 for new ones
