"""Real turns through the `openai` provider against a fake Chat Completions server on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import celery.contrib.testing.tasks  # noqa: F401  (registers celery.ping for start_worker)
import pytest
from celery.contrib.testing.worker import start_worker

from config import OpenAISettings, load_settings
from runtime.admission.batches import evaluate
from runtime.agent.session_log import SessionLog
from runtime.agent.sessions import session_path
from runtime.agent.turn import run_turn
from runtime.inbound.ingest import ingest_page
from tests.fakes.openai_server import FakeOpenAI, Step, completion
from tests.integration.helpers import wait_for
from transports.llm.openai import OpenAIChatProvider
from worker.celery_app import make_app

SEND = "im_send_message"


@pytest.fixture
def settings(tmp_path):
    """No broker here: the model path only (overrides the per-broker integration fixture)."""
    return load_settings(data_dir=tmp_path / "var")


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def agent(settings, fake):
    endpoint = OpenAISettings(
        base_url=fake.base_url,
        api_key="sk-test-key",
        model="fake-model",
        timeout_s=0.5,
        max_attempts=3,
        retry_backoff_s=0.01,
    )
    return settings.agent.model_copy(update={"provider": "openai", "openai": endpoint})


@pytest.fixture
def customer(store, shop, platform, transport):
    page = transport.page_of(shop, [platform.buyer_says(shop, "b1", "张三", "什么时候发货？")])
    customer_id = ingest_page(store, page).customer_ids[0]
    evaluate(store, customer_id, 1000)
    return customer_id


def turn(store, settings, agent, customer):
    """Runs of the customer's turn until it no longer waits for a model retry, as the
    dispatcher brings them (RunTurn with the backoff as its countdown)."""
    provider = OpenAIChatProvider(agent.openai)
    runs = 0
    while True:
        result = run_turn(store, provider, customer, settings.sessions_dir, settings.zone, agent)
        runs += 1
        if result is None or result.outcome != "waiting":
            return result
        assert runs < agent.openai.max_attempts  # each run makes one attempt at most
        time.sleep(result.retry_after_s)


def events(settings, result):
    return SessionLog(session_path(settings.sessions_dir, result.session_id)).load()


def outbox(store):
    with store.read() as conn:
        return conn.execute("SELECT body, state FROM outbox_request").all()


def test_a_tool_call_reaches_the_outbox_and_the_request_is_well_formed(store, settings, agent, customer, fake):
    fake.script.extend(
        [Step(body=completion(None, [("c1", SEND, '{"text": "现货48小时内发货"}')])), Step(body=completion("已回复"))]
    )
    result = turn(store, settings, agent, customer)
    assert result.outcome == "complete"
    assert outbox(store) == [("现货48小时内发货", "pending")]
    first, second = fake.requests
    assert first["model"] == "fake-model" and fake.headers[0]["Authorization"] == "Bearer sk-test-key"
    assert [t["function"]["name"] for t in first["tools"]] == [SEND, "im_query_history", "im_handoff"]
    assert first["messages"][0]["role"] == "system" and agent.persona in first["messages"][0]["content"]
    assert "[counterpart 张三] 什么时候发货？" in first["messages"][1]["content"]
    assert second["messages"][-1]["role"] == "tool" and second["messages"][-1]["tool_call_id"] == "c1"
    usage = [e.usage for e in events(settings, result) if e.type == "assistant/message"]
    assert usage[0]["total_tokens"] == 110
    assert (usage[0]["context_tokens"], usage[0]["source"]) == (110, "provider")


def test_malformed_tool_arguments_get_a_tool_error_not_a_crash(store, settings, agent, customer, fake):
    fake.script.extend(
        [
            Step(body=completion(None, [("c1", SEND, '{"text": "未闭合')])),
            Step(body=completion(None, [("c2", SEND, '{"text": "48小时内发货"}')])),
            Step(body=completion("好了")),
        ]
    )
    result = turn(store, settings, agent, customer)
    assert result.outcome == "complete"
    tool_error = fake.requests[1]["messages"][-1]
    assert tool_error["role"] == "tool" and tool_error["content"].startswith("Error: arguments of im_send_message")
    assert outbox(store) == [("48小时内发货", "pending")]


def test_a_rate_limit_is_retried_and_the_model_never_sees_the_attempt(store, settings, agent, customer, fake):
    fake.script.extend([Step(status=429), Step(body=completion(None, [("c1", SEND, '{"text": "好的"}')]))])
    fake.script.append(Step(body=completion("完成")))
    result = turn(store, settings, agent, customer)
    assert result.outcome == "complete"
    attempts = [(e.attempt, e.code, e.status) for e in events(settings, result) if e.type == "assistant/attempt"]
    assert attempts == [(1, "MODEL_HTTP_429", 429)]
    assert fake.requests[0]["messages"] == fake.requests[1]["messages"]
    assert "MODEL_HTTP_429" not in json.dumps(fake.requests[2]["messages"])


def test_a_slow_model_times_out_and_is_retried(store, settings, agent, customer, fake):
    fake.script.extend(
        [
            Step(delay_s=1.5, body=completion("too late")),
            Step(body=completion(None, [("c1", SEND, '{"text": "好的"}')])),
            Step(body=completion("完成")),
        ]
    )
    result = turn(store, settings, agent, customer)
    assert result.outcome == "complete"
    assert [e.code for e in events(settings, result) if e.type == "assistant/attempt"] == ["MODEL_TIMEOUT"]


def test_an_outage_interrupts_the_turn_and_one_follow_up_answers_later(store, settings, agent, customer, fake):
    fake.script.extend([Step(status=500), Step(status=502), Step(status=503)])
    down = turn(store, settings, agent, customer)
    assert (down.outcome, outbox(store)) == ("interrupted", [])
    log = events(settings, down)
    assert [e.status for e in log if e.type == "assistant/attempt"] == [500, 502, 503]
    assert (log[-1].type, log[-1].reason) == ("turn/end", "model-unavailable")
    with store.read() as conn:
        assert conn.execute("SELECT state FROM admission_batch").scalar_one() == "committed"
    up = turn(store, settings, agent, customer)  # what the reconciler does after its grace period
    assert up.outcome == "complete"
    assert len(outbox(store)) == 1 and "什么时候发货" in outbox(store)[0][0]
    kinds = [e.kind for e in events(settings, up) if e.type == "turn/start"]
    assert kinds == ["batch", "follow-up"]
    assert turn(store, settings, agent, customer) is None  # done: no second follow-up


def test_a_rejected_request_is_not_retried(store, settings, agent, customer, fake):
    fake.script.append(Step(status=400))
    result = turn(store, settings, agent, customer)
    assert result.outcome == "interrupted"
    assert [e.code for e in events(settings, result) if e.type == "assistant/attempt"] == ["MODEL_HTTP_400"]
    assert len(fake.requests) == 1


def test_a_worker_answers_through_the_llm_path(settings, agent, broker_url, store, shop, platform, transport, fake):
    app = make_app(settings.model_copy(update={"broker_url": broker_url, "agent": agent}))
    message = platform.buyer_says(shop, "b1", "张三", "这款有现货吗")
    with start_worker(app, pool="solo", perform_ping_check=True, shutdown_timeout=30):
        app.send_task("kefu.ingest.page", args=[transport.page_of(shop, [message]).model_dump(mode="json")])
        wait_for(lambda: len(platform.received(shop)) == 1, 30, "the LLM's reply")
    assert platform.received(shop)[0].text == "您好，已收到您的消息：这款有现货吗"
    assert len(fake.requests) == 2  # the tool call, then the closing text


def test_kefu_demo_answers_through_the_llm_path(tmp_path, fake):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEFU_") or k == "KEFU_TEST_REDIS_URL"}
    env.update(
        KEFU_AGENT__PROVIDER="openai",
        KEFU_AGENT__OPENAI__BASE_URL=fake.base_url,
        KEFU_AGENT__OPENAI__API_KEY="sk-demo",
        KEFU_AGENT__OPENAI__MODEL="fake-model",
        KEFU_LANGUAGE="en",  # the verdict line asserted below, in English
    )
    run = subprocess.run(
        [str(Path(sys.executable).parent / "kefu"), "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().splitlines()[-1] == "demo: 16 buyer messages, 16 answered, 0 duplicate replies, 0 lost"
    assert "已收到您的消息" in run.stdout and len(fake.requests) >= 20
