"""Session headers, rotation and fork (seed 002 5.1, 5.7-5.8): a new session begins with its own
seq from 0, names its parent and why it began, and long-term memory carries the buyer across;
a fork copies a prefix as it was, marks where the copy ends and closes what it left open,
while the parent's log stays byte for byte; the request header and a tools change are logged."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from config import OpenAISettings, Settings
from runtime.admission.batches import evaluate
from runtime.agent.rotation import fork_by_operator, rotate_by_operator
from runtime.agent.rounds import rounds
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.session_log import (
    EndSeed,
    RequestHeader,
    SessionLog,
    ToolResult,
    TurnEnd,
    event_line,
)
from runtime.agent.sessions import customer_sessions, list_sessions, session_path
from runtime.agent.turn import TurnResult, run_turn
from runtime.agent.view import model_view
from runtime.errors import KefuError
from runtime.inbound.ingest import ingest_page
from runtime.memory.engine import MemoryEngine
from runtime.memory.store import MemoryStore
from runtime.ports import AssistantReply, ChatMessage, ModelError, ToolCall, ToolSpec
from runtime.store import DeliveryStore
from runtime.store.leases import held
from runtime.store.states import RotationReason, SessionOrigin
from transports.simulator import SimulatedPlatform, SimulatorTransport
from worker.cli import cli

KNOWLEDGE = load_knowledge(None)


def memory_engine(settings: Settings) -> MemoryEngine:
    memory = settings.memory.model_copy(update={"allow_small_window": True})
    return MemoryEngine(MemoryStore(settings.memory_path), memory, 100_000, settings.zone, False)


def turn(
    store: DeliveryStore,
    settings: Settings,
    transport: SimulatorTransport,
    platform: SimulatedPlatform,
    text: str,
    memory: MemoryEngine | None = None,
    settings_agent: object = None,
    provider: object = None,
) -> tuple[int, TurnResult]:
    message = platform.buyer_says("shop", "b1", "张三", text)
    customer = ingest_page(store, transport.page_of("shop", [message])).customer_ids[0]
    evaluate(store, customer, 1000)
    result = run_turn(
        store, provider or RulesProvider(KNOWLEDGE), customer, settings.sessions_dir, settings.zone,
        settings_agent or settings.agent, memory_engine=memory,
    )  # type: ignore[arg-type]  # fmt: skip
    assert result is not None
    return customer, result


def load(settings: Settings, session_id: str | None) -> SessionLog:
    assert session_id is not None
    log = SessionLog(session_path(settings.sessions_dir, session_id))
    log.load()
    return log


def headers(store: DeliveryStore, customer: int) -> list:
    with store.read() as conn:
        return customer_sessions(conn, customer)


def test_the_first_session_has_a_header_and_requests_are_logged_once_until_they_change(
    store, settings, shop, transport, platform
):
    customer, result = turn(store, settings, transport, platform, "什么时候发货？")
    [header] = headers(store, customer)
    assert (header.id, header.origin, header.model, header.parent) == (f"s{customer}-1", "first", "rules", None)
    turn(store, settings, transport, platform, "发什么快递？")
    log = load(settings, result.session_id)
    requests = [e for e in log.events if isinstance(e, RequestHeader)]
    assert len(requests) == 1 and requests[0].model == "rules" and "im_send_message" in requests[0].tools
    steps = [e for e in log.events if e.type == "step/start"]
    assert len([e for e in log.events if e.type == "request/context"]) == len(steps)
    # Memory switched on between turns: the model is told which tools came, then a new header.
    turn(store, settings, transport, platform, "可以开发票吗", memory=memory_engine(settings))
    log = load(settings, result.session_id)
    [developer] = [e for e in log.events if e.type == "developer/message"]
    assert "memory_recall" in developer.added and not developer.removed
    assert isinstance(log.events[developer.seq + 1], RequestHeader)
    assert any(m.role == "user" and m.content == developer.text for m in model_view(log))


def test_an_operator_rotation_carries_the_buyer_across_in_memory(store, settings, shop, transport, platform):
    memory = memory_engine(settings)
    customer, first = turn(store, settings, transport, platform, "我的订单 A7731 什么时候发货？", memory)
    turn(store, settings, transport, platform, "好的谢谢", memory)
    old = load(settings, first.session_id)
    old_bytes = session_path(settings.sessions_dir, first.session_id).read_bytes()  # type: ignore[arg-type]
    header = rotate_by_operator(store, customer, settings.sessions_dir, memory, settings.agent)
    assert (header.origin, header.reason, header.parent) == (SessionOrigin.ROTATED, "operator", first.session_id)
    # Every turn of the old session went to memory first: its last archive reaches its end.
    archived = load(settings, first.session_id)
    last_archive = [e for e in archived.events if e.type == "memory/archive"][-1]
    assert last_archive.upto == old.offset
    assert session_path(settings.sessions_dir, first.session_id).read_bytes().startswith(old_bytes)  # type: ignore[arg-type]
    _, second = turn(store, settings, transport, platform, "订单 A7731 发的什么快递？", memory)
    assert second.session_id == header.id
    log = load(settings, second.session_id)
    assert [e.seq for e in log.events] == list(range(len(log.events)))  # its own seq from 0
    assert "新会话" in log.events[0].text and "运营人员开启了新会话" in log.events[0].text  # type: ignore[union-attr]
    recalled = [e for e in log.events if e.type == "memory/recall"]
    assert recalled and "A7731" in recalled[-1].text  # the old session's words, recalled
    assert "A7731" in model_view(log)[0].content
    rows = list_sessions(store, settings.sessions_dir, customer)
    assert [(r.id, r.current) for r in rows] == [(first.session_id, False), (header.id, True)]


def test_inactivity_and_a_model_change_rotate_before_the_next_batch(store, settings, shop, transport, platform):
    customer, first = turn(store, settings, transport, platform, "在吗")
    idle = settings.agent.model_copy(update={"session_idle_h": 0.001 / 3600})  # one millisecond
    time.sleep(0.01)
    _, second = turn(store, settings, transport, platform, "今天发货吗", settings_agent=idle)
    assert second.session_id != first.session_id
    other_model = settings.agent.model_copy(update={"provider": "openai", "openai": OpenAISettings(model="m2")})
    _, third = turn(store, settings, transport, platform, "发什么快递", settings_agent=other_model)
    _, fourth = turn(store, settings, transport, platform, "好的", settings_agent=other_model)
    assert fourth.session_id == third.session_id != second.session_id
    reasons = [(h.reason, h.model) for h in headers(store, customer)]
    assert reasons == [(None, "rules"), ("inactivity", "rules"), ("model-change", "openai:m2")]
    assert "更换了模型" in load(settings, third.session_id).events[0].text  # type: ignore[union-attr]


class Unavailable:
    """A model provider that is down (the outside service, not kefu's code)."""

    def complete(self, messages: list[ChatMessage], tools: list[ToolSpec]) -> AssistantReply:
        raise ModelError("PROVIDER_DOWN", transient=False)


def test_a_batch_with_a_turn_in_the_session_gets_its_follow_up_there_not_in_a_new_one(
    store, settings, shop, transport, platform
):
    customer, first = turn(store, settings, transport, platform, "在吗")
    _, failed = turn(store, settings, transport, platform, "发货了吗", provider=Unavailable())
    assert failed.outcome == "interrupted"
    idle = settings.agent.model_copy(update={"session_idle_h": 0.001 / 3600})
    time.sleep(0.01)
    again = run_turn(store, RulesProvider(KNOWLEDGE), customer, settings.sessions_dir, settings.zone, idle)
    assert again is not None and again.session_id == first.session_id
    log = load(settings, first.session_id)
    assert [e.kind for e in log.events if e.type == "turn/start"][-1] == "follow-up"  # type: ignore[attr-defined]


class CallsThenStops:
    """A model that asks for a tool: the fork is cut right after that request."""

    def complete(self, messages: list[ChatMessage], tools: list[ToolSpec]) -> AssistantReply:
        if messages[-1].role == "tool":
            return AssistantReply(text="好了")
        return AssistantReply(tool_calls=[ToolCall(id="c1", name="im_query_history", arguments='{"limit": 5}')])


def test_a_fork_copies_the_prefix_marks_its_end_and_closes_the_open_turn(store, settings, shop, transport, platform):
    customer, first = turn(store, settings, transport, platform, "在吗")
    turn(store, settings, transport, platform, "查一下记录", provider=CallsThenStops())
    parent = load(settings, first.session_id)
    parent_bytes = session_path(settings.sessions_dir, first.session_id).read_bytes()  # type: ignore[arg-type]
    cut = next(e.seq for e in reversed(parent.events) if e.type == "assistant/message" and e.tool_calls)  # type: ignore[attr-defined]
    header = fork_by_operator(store, customer, settings.sessions_dir, settings.agent, cut)
    assert (header.origin, header.parent, header.inherited) == (SessionOrigin.FORKED, first.session_id, cut + 1)
    assert session_path(settings.sessions_dir, first.session_id).read_bytes() == parent_bytes  # type: ignore[arg-type]
    child = load(settings, header.id)
    assert [event_line(e) for e in child.events[: cut + 1]] == [event_line(e) for e in parent.events[: cut + 1]]
    marker, result, step_end, end = child.events[cut + 1 :]
    assert isinstance(marker, EndSeed) and marker.inherited and marker.parent == first.session_id
    assert isinstance(result, ToolResult) and result.code == "TOOL_NOT_STARTED" and "fork" in result.content
    assert step_end.type == "step/end" and isinstance(end, TurnEnd) and end.outcome == "forked"
    assert {e.at for e in child.events[cut + 1 :]} == {parent.events[cut].at}  # deterministic closers
    # The customer goes on in the child, its own seq after the seed; rounds are not doubled.
    _, after = turn(store, settings, transport, platform, "谢谢")
    assert after.session_id == header.id
    grown = load(settings, header.id)
    assert [e.seq for e in grown.events] == list(range(len(grown.events)))
    listed = rounds(settings.sessions_dir, customer)
    assert [r.session_id for r in listed].count(header.id) == 1
    assert len(listed) == 3 and len({(r.batch_id, r.kind) for r in listed}) == 3


def test_a_fork_outside_the_log_or_of_a_busy_session_is_refused(store, settings, shop, transport, platform):
    customer, first = turn(store, settings, transport, platform, "在吗")
    size = load(settings, first.session_id).offset
    with pytest.raises(KefuError, match="KEFU_SESSION_BOUNDARY"):
        fork_by_operator(store, customer, settings.sessions_dir, settings.agent, size)
    with held(store, f"customer:{customer}", 60) as fence:
        assert fence is not None
        with pytest.raises(KefuError, match="KEFU_SESSION_BUSY"):
            rotate_by_operator(store, customer, settings.sessions_dir, None, settings.agent)
    with pytest.raises(KefuError, match="KEFU_CUSTOMER_UNKNOWN"):
        rotate_by_operator(store, 999_999, settings.sessions_dir, None, settings.agent)
    assert [h.id for h in headers(store, customer)] == [first.session_id]


def test_the_cli_lists_rotates_and_forks(kefu, store, settings, shop, transport, platform):
    customer, first = turn(store, settings, transport, platform, "在吗")
    rotated = kefu.invoke(cli, ["sessions", "rotate", str(customer)])
    assert rotated.exit_code == 0 and f"new session s{customer}-2" in rotated.output
    forked = kefu.invoke(cli, ["sessions", "fork", str(customer), "--at", "0"])
    assert forked.exit_code == 2 and "KEFU_SESSION_BOUNDARY" in forked.output  # s-2 has no events yet
    turn(store, settings, transport, platform, "发货了吗")
    forked = kefu.invoke(cli, ["sessions", "fork", str(customer), "--at", "0"])
    assert forked.exit_code == 0 and f"new session s{customer}-3" in forked.output
    listed = kefu.invoke(cli, ["sessions", "list", str(customer), "--json"])
    assert listed.exit_code == 0
    assert [(h.origin, h.reason) for h in headers(store, customer)] == [
        ("first", None),
        ("rotated", RotationReason.OPERATOR),
        ("forked", RotationReason.FORK),
    ]
    assert f'"id": "s{customer}-3"' in listed.output.replace('":"', '": "')
    missing = kefu.invoke(cli, ["sessions", "rotate", "999999"])
    assert missing.exit_code == 2 and "KEFU_CUSTOMER_UNKNOWN" in missing.output
    assert Path(settings.sessions_dir).is_dir()


def test_a_fork_into_the_turn_of_a_batch_still_waiting_is_refused_and_one_before_it_answers_once(
    store, settings, shop, transport, platform
):
    customer, first = turn(store, settings, transport, platform, "在吗")
    _, failed = turn(store, settings, transport, platform, "发货了吗", provider=Unavailable())
    assert failed.outcome == "interrupted"  # its batch stays open for a follow-up
    parent = load(settings, first.session_id)
    start = [e for e in parent.events if e.type == "turn/start"][-1].seq
    with pytest.raises(KefuError, match="KEFU_SESSION_BOUNDARY") as refused:
        fork_by_operator(store, customer, settings.sessions_dir, settings.agent, start + 1)
    assert f"fork at {start - 1} or earlier" in refused.value.action
    assert [h.id for h in headers(store, customer)] == [first.session_id]  # nothing written
    header = fork_by_operator(store, customer, settings.sessions_dir, settings.agent, start - 1)
    registered: list[str] = []
    again = run_turn(store, RulesProvider(KNOWLEDGE), customer, settings.sessions_dir, settings.zone,
                     settings.agent, on_registered=registered.append)  # fmt: skip
    assert again is not None and again.session_id == header.id and again.outcome == "complete"
    assert len(registered) == 1  # the waiting batch is answered once, in the child
