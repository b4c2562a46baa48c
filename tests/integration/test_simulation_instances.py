"""Simulation instances end to end, against a real worker and the fake OpenAI server playing both
sides: a paired buyer talks to the agent until it ends the conversation (one reply per buyer
turn, both session logs whole), survives a crash of its own process, and a stop during a
running turn lets nothing reach the buyer afterwards; an operator's direct message reaches the
agent under test as a plain message and its answer the operator, never the buyer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from config import Settings
from runtime.agent.history import query_history
from runtime.agent.operator_dm import answer_of
from runtime.agent.session_log import AssistantMessage, SessionLog, UserMessage
from runtime.agent.sessions import session_path
from runtime.customers.transcript import transcript
from runtime.errors import KefuError
from runtime.ports import AssistantReply, ChatMessage, ModelProvider, ToolSpec
from runtime.store import DeliveryStore
from tests.fakes.openai_server import FakeOpenAI, Step, completion, default_policy
from tests.integration.helpers import wait_for, worker_env
from transports.simulator import SimulatedPlatform
from transports.simulator.platform import InstanceState
from worker.celery_app import make_app
from worker.process import WorkerProcess
from worker.simulation import ensure_sample_shop
from worker.simulation_instances import PairedBuyer, SimulationError, buyer_provider, operator_dm, say, stop

BUYER_LINES = ["你好，请问今天下单什么时候发货？", "可以开发票吗"]


def both_sides(request: dict[str, Any]) -> dict[str, Any]:
    """The buyer model says its lines in turn, then ends the conversation; the agent echoes."""
    if request["model"] != "fake-buyer":
        return default_policy(request)
    assert [tool["function"]["name"] for tool in request["tools"]] == ["im_sim_stop"]
    said = sum(m["role"] == "assistant" for m in request["messages"])
    if said < len(BUYER_LINES):
        return completion(BUYER_LINES[said])
    return completion(None, [("stop-1", "im_sim_stop", "{}")])


@pytest.fixture(params=["embedded"])
def broker_url(request: pytest.FixtureRequest) -> str:
    return str(request.param)  # the model's side is under test here; brokers have their own tests


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(policy=both_sides) as server:
        yield server


@pytest.fixture
def serving(settings: Settings, fake: FakeOpenAI) -> Iterator[Settings]:
    model = {
        "KEFU_AGENT__PROVIDER": "openai",
        "KEFU_AGENT__OPENAI__BASE_URL": fake.base_url,
        "KEFU_AGENT__OPENAI__API_KEY": "sk-agent",
        "KEFU_AGENT__OPENAI__MODEL": "fake-agent",
    }
    worker = WorkerProcess(worker_env(settings, **model), settings.data_dir / "worker.log", listen=True).start()
    worker.wait_ready(make_app(settings))
    buyer = settings.simulator.buyer.model_copy(update={"model": "fake-buyer"})
    agent = settings.agent.openai.model_copy(update={"base_url": fake.base_url, "api_key": "sk-agent"})
    configured = settings.model_copy(
        update={
            "simulator": settings.simulator.model_copy(update={"buyer": buyer}),
            "agent": settings.agent.model_copy(update={"openai": agent}),
        }
    )
    yield configured
    worker.stop()


class CrashAfter:
    """The buyer's model, dying (as its process would) at call `n`."""

    def __init__(self, inner: ModelProvider, n: int) -> None:
        self.name, self.inner, self.calls, self.n = "crashing", inner, 0, n

    def complete(self, messages: list[ChatMessage], tools: list[ToolSpec]) -> AssistantReply:
        self.calls += 1
        if self.calls == self.n:
            raise KeyboardInterrupt("the buyer's process died")
        return self.inner.complete(messages, tools)


def test_a_paired_buyer_talks_until_it_ends_the_conversation_and_survives_its_own_crash(serving: Settings) -> None:
    store = DeliveryStore(serving.delivery_path, serving.delivery)
    ensure_sample_shop(store)
    platform = SimulatedPlatform(serving.simulator_path)
    instance = platform.new_instance("sim-shop", "paired", "小美", "想买四件套，关心发货和发票。")
    log_path = serving.data_dir / "simulations" / f"{instance.id}-buyer.jsonl.zst"
    crashing = CrashAfter(buyer_provider(serving), n=2)
    with pytest.raises(KeyboardInterrupt):
        PairedBuyer(store, platform, instance, crashing, log_path).run()
    assert platform.instance(instance.id).state == InstanceState.RUNNING  # a crash is not a stop
    ended = PairedBuyer(store, platform, instance, buyer_provider(serving), log_path).run()  # `kefu simulate resume`
    assert ended == "buyer-ended" and platform.instance(instance.id).state == InstanceState.STOPPED

    said = [m.text for m in platform.buyer_messages_in(instance.conversation_id)]
    assert said == BUYER_LINES  # each line once, the crash notwithstanding
    replies = platform.received_in(instance.conversation_id)
    assert [r.text for r in replies] == [f"您好，已收到您的消息：{line}" for line in BUYER_LINES]  # one per turn
    buyer_log = SessionLog(log_path)
    buyer_log.load()
    assert [e.text for e in buyer_log.events if isinstance(e, AssistantMessage) and e.text] == BUYER_LINES
    assert [e.source for e in buyer_log.events if isinstance(e, UserMessage)] == [r.client_ref for r in replies]
    with store.read() as conn:
        session_id = conn.execute(
            "SELECT session_id FROM customer WHERE conversation_id = :c", {"c": instance.conversation_id}
        ).scalar_one()
    agent_log = SessionLog(session_path(serving.sessions_dir, session_id))
    agent_log.load()
    assert sum(e.type == "turn/start" for e in agent_log.events) == 2
    with pytest.raises(SimulationError, match="KEFU_SIMULATION_STOPPED"):
        say(platform, instance, "还在吗")  # a stopped instance never resumes


def test_a_stop_during_a_running_turn_lets_nothing_reach_the_buyer(serving: Settings, fake: FakeOpenAI) -> None:
    store = DeliveryStore(serving.delivery_path, serving.delivery)
    ensure_sample_shop(store)
    platform = SimulatedPlatform(serving.simulator_path)
    instance = platform.new_instance("sim-shop", "manual", "操作员扮演的顾客")
    reply = json.dumps({"text": "马上为您查询"}, ensure_ascii=False)
    fake.script.append(Step(body=completion(None, [("c1", "im_send_message", reply)]), delay_s=3))
    say(platform, instance, "我的快递到哪了？")
    wait_for(lambda: len(fake.requests) >= 1, 30, "the agent's turn under way")
    stopped = stop(store, platform, instance, timeout_s=60)  # returns once the conversation is quiet
    assert stopped.state == InstanceState.STOPPED
    assert platform.received_in(instance.conversation_id) == []  # the turn's reply was refused
    with store.read() as conn:
        states = conn.execute(
            "SELECT state, error_code FROM outbox_request WHERE conversation_id = :c",
            {"c": instance.conversation_id},
        ).all()
    assert [tuple(row) for row in states] == [("failed", "SIMULATION_STOPPED")]
    assert stop(store, platform, instance, timeout_s=5).state == InstanceState.STOPPED  # again: harmless


def test_an_operator_dm_reaches_the_agent_under_test_and_never_the_buyer(
    serving: Settings, fake: FakeOpenAI, tmp_path: Path
) -> None:
    store = DeliveryStore(serving.delivery_path, serving.delivery)
    ensure_sample_shop(store)
    platform = SimulatedPlatform(serving.simulator_path)
    instance = platform.new_instance("sim-shop", "manual", "操作员扮演的顾客")
    with pytest.raises(SimulationError, match="KEFU_SIMULATION_NO_CONVERSATION"):
        operator_dm(store, platform, instance, "先别回复", "dm-0")  # no conversation yet
    say(platform, instance, "你好，在吗")
    wait_for(lambda: len(platform.received_in(instance.conversation_id)) == 1, 30, "the reply to the buyer")
    wait_for(lambda: len(fake.requests) == 2, 30, "the end of the buyer's turn")  # its send, then its close

    fake.script.append(Step(body=completion("收到，之后我会回答得更简洁。")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEFU_")}
    env |= worker_env(serving, COLUMNS="200", KEFU_LANGUAGE="en")  # "accepted", asserted below, in English
    command = [str(Path(sys.executable).parent / "kefu"), "simulate", "operator-dm", instance.id]
    dm = [*command, "之后请回答得简洁一些", "--request-id", "dm-1", "--wait", "60"]
    done = subprocess.run(dm, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "accepted" in done.stdout and "收到，之后我会回答得更简洁。" in done.stdout  # the agent's answer
    dm_request = fake.requests[-1]["messages"]
    assert dm_request[-1] == {"role": "user", "content": "之后请回答得简洁一些"}  # plain: no time, no label

    again = operator_dm(store, platform, instance, "之后请回答得简洁一些", "dm-1")  # a retry
    assert not again.created
    with pytest.raises(KefuError, match="KEFU_REQUEST_ID_CONFLICT"):
        operator_dm(store, platform, instance, "别的内容", "dm-1")
    answer = answer_of(store, serving.sessions_dir, again)
    assert answer is not None and answer.texts == ["收到，之后我会回答得更简洁。"]
    assert len(fake.requests) == 3  # the buyer's turn (send, then its end) and the DM's one call: no re-run
    assert len(platform.received_in(instance.conversation_id)) == 1  # nothing reached the buyer

    with store.read() as conn:
        history = query_history(conn, again.customer_id, 20, None, ZoneInfo("Asia/Shanghai"))
    assert not any("简洁" in line for line in history.lines)  # not an IM line
    lines = transcript(store, again.customer_id, sessions_dir=serving.sessions_dir).lines
    shown = [(line.speaker, line.text) for line in lines if line.speaker == "operator-dm"]
    assert shown == [("operator-dm", "之后请回答得简洁一些")]
    assert any(line.speaker == "agent-note" and "简洁" in line.text for line in lines)

    stop(store, platform, instance, timeout_s=30)
    refused = subprocess.run([*command, "还在吗"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "KEFU_SIMULATION_STOPPED" in refused.stdout + refused.stderr
