"""The memory engine through a real worker on Redis: turns that fill a small context window
are archived by `kefu.memory.archive`, scored (by the heuristic under the rules agent, by the
model through `memory_judge` under an OpenAI-compatible one), and a later question recalls
them into the system prompt the model receives."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import celery.contrib.testing.tasks  # noqa: F401  (registers celery.ping for start_worker)
import pytest
import redis
from celery.contrib.testing.worker import start_worker

from config import OpenAISettings
from runtime.agent.session_log import SessionLog
from runtime.agent.sessions import session_path
from runtime.agent.view import model_view
from runtime.memory.store import MemoryStore
from tests.fakes.openai_server import FakeOpenAI, completion, default_policy
from tests.integration.conftest import REDIS_TEST_DB
from tests.integration.helpers import wait_for
from worker.celery_app import make_app

EARLY = ["你好，在吗？", "今天下单什么时候发货？", "发什么快递？", "可以开发票吗", "这款是什么材质的？", "有优惠券吗"]
EARLY += ["能用花呗分期吗？", "枕套的尺寸多大？", "收到有破损怎么办", "好的，谢谢"]
LATER = "之前说的快递，改发顺丰要补运费吗？"


@pytest.fixture
def broker_url(redis_base_url):
    url = f"{redis_base_url}/{REDIS_TEST_DB}"
    redis.Redis.from_url(url).flushdb()
    return url


def small_window(settings, **agent):
    """A window a few turns fill. It leaves room for the system prompt (about 200 tokens) and a
    recall block, so the emergency line before a model step does not re-archive the block the
    turn has just recalled."""
    return settings.model_copy(
        update={
            "agent": settings.agent.model_copy(update={"context_window_tokens": 1200, **agent}),
            "memory": settings.memory.model_copy(update={"allow_small_window": True}),
        }
    )


def talk(app, shop, platform, transport, texts):
    for text in texts:
        message = platform.buyer_says(shop, "b1", "张三", text)
        before = len(platform.received(shop))
        app.send_task("kefu.ingest.page", args=[transport.page_of(shop, [message]).model_dump(mode="json")])
        wait_for(lambda n=before: len(platform.received(shop)) > n, 30, f"the reply to {text!r}")


def memory_settled(settings) -> bool:
    path = settings.memory_path
    return path.exists() and bool(MemoryStore(path).scopes()) and not MemoryStore(path).pending()


def judged(settings) -> list:
    """Every folder, once the model has scored at least one (else empty)."""
    store = MemoryStore(settings.memory_path)
    folders = [f for scope in store.scopes() for f in store.folders(scope)]
    return folders if any(f.score_source == "llm" for f in folders) else []


def memory_queue_empty(settings) -> bool:
    return redis.Redis.from_url(settings.broker_url).llen("kefu.memory.default") == 0


def recall_block(settings) -> list[str]:
    events = session_events(settings)
    last = [e for e in events if e.type == "memory/recall"]
    return [entry["folder_id"] for entry in last[-1].entries] if last else []


def session_events(settings, customer_session="s1-1"):
    return SessionLog(session_path(settings.sessions_dir, customer_session)).load()


def test_rules_agent_archives_scores_heuristically_and_recalls_into_the_prompt(
    settings, store, shop, platform, transport
):
    settings = small_window(settings)
    app = make_app(settings)
    with start_worker(app, pool="solo", perform_ping_check=True, shutdown_timeout=30):
        talk(app, shop, platform, transport, EARLY)
        wait_for(lambda: memory_settled(settings), 30, "archived folders, all scored")
        talk(app, shop, platform, transport, [LATER])
        recalled_before = recall_block(settings)
        # The index rebuilt through the worker and broker leaves the store whole.
        app.send_task("kefu.memory.rebuild_index", args=["customer-1"])
        app.send_task("kefu.memory.score_backlog")
        app.send_task("kefu.memory.selfcheck")
        wait_for(lambda: memory_queue_empty(settings), 30, "the memory queue to drain")
    assert app.tasks["kefu.memory.selfcheck"].apply().get() == "PASS"
    [row] = app.tasks["kefu.memory.report"].apply().get()
    assert row["scope"] == "customer-1" and row["pending"] == 0 and row["recalls"] == 1
    shown = subprocess.run(
        [str(Path(sys.executable).parent / "kefu"), "memory", "show", "--json"],
        env={**os.environ, "KEFU_DATA_DIR": str(settings.data_dir)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    (scope,) = json.loads(shown.stdout).values()
    folders = {f["id"]: f for f in scope["folders"]}
    assert folders and all(f["scored"] and f["score_source"] == "heuristic" for f in folders.values())
    assert all(3 <= len(f["keywords"]) <= 8 and 0.01 <= f["alpha"] <= 1 for f in folders.values())
    recalled = recalled_before
    assert recalled and set(recalled) <= set(folders) and scope["recall_block"] == recalled
    log = SessionLog(session_path(settings.sessions_dir, "s1-1"))
    log.load()
    system = model_view(log)[0].content
    texts = {i: MemoryStore(settings.memory_path).text(i) for i in recalled}
    assert any("快递" in t for t in texts.values()) and all(t.rstrip() in system for t in texts.values())
    assert len(platform.received(shop)) == len(EARLY) + 1  # one reply per message, archive or not


def judging_model(request: dict) -> dict:
    """A model that does its scoring task first (the ids it is shown), then answers the buyer."""
    messages = request["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    judge_ids = {
        c["id"] for m in messages for c in m.get("tool_calls") or [] if c["function"]["name"] == "memory_judge"
    }
    judged_this_turn = any(c["id"] in judge_ids for m in messages[last_user:] for c in m.get("tool_calls") or [])
    pending = re.findall(r"待评分 id=(\S+)", messages[0]["content"])
    if pending and not judged_this_turn:
        updates = [{"id": i, "alpha": 0.8, "beta": 5, "keywords": ["快递", "顺丰", "运费"]} for i in pending]
        arguments = json.dumps({"updates": updates}, ensure_ascii=False)
        return completion(None, [(f"judge-{len(messages)}", "memory_judge", arguments)])
    rest = [m for m in messages if m.get("tool_call_id") not in judge_ids]
    rest = [m for m in rest if not (m.get("tool_calls") and all(c["id"] in judge_ids for c in m["tool_calls"]))]
    return default_policy({**request, "messages": rest})


def test_an_openai_model_scores_with_memory_judge_and_gets_the_recall_block(settings, store, shop, platform, transport):
    with FakeOpenAI(policy=judging_model) as fake:
        endpoint = OpenAISettings(base_url=fake.base_url, api_key="sk-test", model="fake", max_attempts=1)
        settings = small_window(settings, provider="openai", openai=endpoint)
        app = make_app(settings)
        with start_worker(app, pool="solo", perform_ping_check=True, shutdown_timeout=30):
            talk(app, shop, platform, transport, EARLY)
            wait_for(lambda: MemoryStore(settings.memory_path).scopes(), 30, "an archive")
            talk(app, shop, platform, transport, ["还有别的优惠吗"])  # this turn's model scores them
            wait_for(lambda: judged(settings), 30, "the model's scores")
            talk(app, shop, platform, transport, [LATER])
        tools = {t["function"]["name"] for t in fake.requests[-1]["tools"]}
        assert {"memory_recall", "memory_judge", "memory_image"} <= tools
        tasked = [r for r in fake.requests if "[记忆评分任务]" in r["messages"][0]["content"]]
        assert tasked, "the scoring task reached the model"
        last_system = fake.requests[-2]["messages"][0]["content"]  # the LATER turn's first call
    store_ = MemoryStore(settings.memory_path)
    folders = [f for f in judged(settings) if f.scored]  # the last turn may have archived more, pending
    assert folders and all(f.score_source == "llm" and f.alpha == 0.8 and f.beta == 5 for f in folders)
    assert "[长期记忆]" in last_system and 'trust="可信"' in last_system
    assert any(store_.text(f.id).rstrip() in last_system for f in folders)
