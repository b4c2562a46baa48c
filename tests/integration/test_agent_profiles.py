"""Two agent profiles on one account, end to end (issue 42 item 1): profiles defined in the
shop's kefu.toml, routes given them with `kefu routes` (an unknown one refused), a real worker
process on Redis reading the same kefu.toml, and each conversation answered by its own profile:
a specific direct route as the pre-sales agent, the account's `all` route as the after-sales one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from config import Settings, load_settings
from runtime.agent.sessions import customer_sessions
from tests.integration.conftest import REDIS_TEST_DB
from tests.integration.helpers import wait_for, worker_env
from transports.simulator import SimulatedPlatform, SimulatorTransport
from worker.celery_app import make_app
from worker.process import WorkerProcess

KEFU_TOML = """
[agent.profiles.presale]
persona = "你是小满家居的售前客服，帮顾客选购。"
knowledge_file = "presale.toml"
tools = ["im_send_message", "im_handoff"]
memory = false

[agent.profiles.aftersale]
persona_file = "aftersale-prompt.txt"
knowledge_file = "aftersale.toml"
"""
PRESALE_FAQ = """
greeting = "您好，这里是售前咨询。"
handoff_reason = "售前问题需要人工"
[[faq]]
keywords = ["发货"]
answer = "售前：现在下单，今天就发货。"
"""
AFTERSALE_FAQ = """
greeting = "您好，这里是售后服务。"
handoff_reason = "售后问题需要人工"
[[faq]]
keywords = ["发货"]
answer = "售后：补发的商品三天内发货。"
"""


@pytest.fixture
def settings(tmp_path: Path, redis_base_url: str) -> Settings:
    """On Redis only: the worker is a separate process, as in production."""
    url = f"{redis_base_url}/{REDIS_TEST_DB}"
    redis.Redis.from_url(url).flushdb()
    return load_settings(data_dir=tmp_path / "var", broker_url=url)


@pytest.fixture
def shop_dir(tmp_path: Path) -> Path:
    """Where the shop runs kefu: its kefu.toml and the files it names (relative to it)."""
    folder = tmp_path / "shop"
    folder.mkdir()
    (folder / "kefu.toml").write_text(KEFU_TOML, "utf-8")
    (folder / "presale.toml").write_text(PRESALE_FAQ, "utf-8")
    (folder / "aftersale.toml").write_text(AFTERSALE_FAQ, "utf-8")
    (folder / "aftersale-prompt.txt").write_text("你是小满家居的售后客服，先安抚顾客。\n", "utf-8")
    return folder


def kefu(shop_dir: Path, settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEFU_")}
    env |= {"KEFU_DATA_DIR": str(settings.data_dir), "KEFU_BROKER_URL": settings.broker_url, "KEFU_LANGUAGE": "en"}
    command = [str(Path(sys.executable).parent / "kefu"), *args]
    return subprocess.run(command, cwd=shop_dir, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def worker(settings: Settings, store, shop: str, shop_dir: Path) -> Iterator[WorkerProcess]:
    process = WorkerProcess(worker_env(settings), settings.data_dir / "worker.log", clean_env=True, cwd=shop_dir)
    process.start()
    try:
        process.wait_ready(make_app(settings), timeout_s=60)
        yield process
    finally:
        process.stop()


def test_each_conversation_is_answered_by_its_routes_profile(
    settings, store, shop, shop_dir, platform: SimulatedPlatform, transport: SimulatorTransport, request
):
    vip = platform.conversation_for("b1")
    add = ["routes", "add", "vip", "--account", shop, "--type", "direct", "--conversation", vip]
    refused = kefu(shop_dir, settings, *add, "--profile", "pre-sale")
    assert refused.returncode == 2 and "KEFU_AGENT_PROFILE_UNKNOWN" in refused.stdout + refused.stderr
    assert "Traceback" not in refused.stdout + refused.stderr
    added = kefu(shop_dir, settings, *add, "--profile", "presale")
    assert added.returncode == 0, added.stdout + added.stderr
    moved = kefu(shop_dir, settings, "routes", "set-profile", "all-direct", "aftersale")
    assert moved.returncode == 0, moved.stdout + moved.stderr

    worker = request.getfixturevalue("worker")
    app = make_app(settings)
    for buyer in ("b1", "b2"):  # the same question from each
        page = transport.page_of(shop, [platform.buyer_says(shop, buyer, f"买家{buyer}", "什么时候发货？")])
        app.send_task("kefu.ingest.page", args=[page.model_dump(mode="json")])

    def answered() -> dict[str, str]:
        return {send.recipient_id or "": send.text for send in platform.received(shop)}

    wait_for(lambda: len(answered()) == 2, 60, "a reply to each buyer", lambda: worker.log_path.read_text())
    assert answered() == {"b1": "售前：现在下单，今天就发货。", "b2": "售后：补发的商品三天内发货。"}
    with store.read() as conn:
        customers = dict(conn.execute("SELECT conversation_id, id FROM customer").all())
        headers = {c: customer_sessions(conn, customers[c]) for c in customers}
    profiles = {conversation: [(h.profile, h.model) for h in found] for conversation, found in headers.items()}
    assert profiles == {vip: [("presale", "rules")], platform.conversation_for("b2"): [("aftersale", "rules")]}

    listed = kefu(shop_dir, settings, "agents", "list", "--json")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    rows = {row["name"]: row["routes"] for row in json.loads(listed.stdout)["profiles"]}
    assert rows == {"default": "-", "aftersale": "all-direct", "presale": "vip"}
