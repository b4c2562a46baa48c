"""A simulated conversation lives on its script's clock (seed 001 ImScriptClock): its labels,
history, memory folder times and memory searches read script time, while every record keeps
real time; a real conversation's platform times never move the shop's clock."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from runtime.admission.batches import evaluate
from runtime.agent.history import query_history
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.script_clock import REAL_TIME, ConversationClock, conversation_clock
from runtime.agent.session_log import SessionLog, UserMessage
from runtime.agent.sessions import session_path
from runtime.agent.turn import run_turn
from runtime.customers.transcript import transcript
from runtime.inbound.ingest import ingest_page
from runtime.memory.engine import MemoryEngine, scope_of
from runtime.memory.jobs import SessionJobs, archive_job
from runtime.memory.store import MemoryStore
from runtime.store import now_ms
from runtime.store.clock import clock_at
from runtime.store.lru import Lru

ZONE = ZoneInfo("Asia/Shanghai")
DAY_MS = 86_400_000


def script_ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def say(store, transport, platform, text, at_ms=None):
    message = platform.buyer_says("shop", "b1", "张三", text, at_ms=at_ms)
    return ingest_page(store, transport.page_of("shop", [message])).customer_ids[0]


def answer(store, settings, customer):
    evaluate(store, customer, 1000)
    provider = RulesProvider(load_knowledge(None))
    return run_turn(store, provider, customer, settings.sessions_dir, ZONE, settings.agent)


def batches(settings, session_id):
    events = SessionLog(session_path(settings.sessions_dir, session_id)).load()
    return [e.text for e in events if isinstance(e, UserMessage)]


def test_a_real_moment_reads_as_the_script_time_of_the_latest_message_before_it():
    clock = ConversationClock(((1_000, 0), (5_000, DAY_MS)))
    assert [clock.shown(t) for t in (500, 3_000, 5_000, 6_000)] == [500, 3_000, 5_000 + DAY_MS, 6_000 + DAY_MS]
    assert REAL_TIME.shown(123) == 123


def test_labels_and_history_follow_the_script_clock_across_days(store, settings, shop, transport, platform):
    tuesday, friday = script_ms("2026-03-03T09:00:00+08:00"), script_ms("2026-03-06T18:00:00+08:00")
    customer = say(store, transport, platform, "什么时候发货？", at_ms=tuesday)
    first = answer(store, settings, customer)
    with store.read() as conn:
        replied = conn.execute("SELECT max(created_at) FROM outbox_request").scalar_one()
    # Friday's message comes in the millisecond after Tuesday's reply, as a buyer's would (the
    # transcript's order is real time; within one millisecond, input first), and "now" stays there.
    with clock_at(replied + 1):
        customer = say(store, transport, platform, "还没收到，什么时候发货？", at_ms=friday)
        answer(store, settings, customer)
        shown = batches(settings, first.session_id)
        assert shown[0].startswith("[2026-03-03 09:00] [counterpart 张三]")
        assert shown[1].startswith("[2026-03-06 18:00] [counterpart 张三]")
        with store.read() as conn:
            clock = conversation_clock(conn, customer)
            lines = query_history(conn, customer, 10, None, ZONE, clock).lines
            received = conn.execute("SELECT max(received_at) FROM inbound_message").scalar_one()
        assert [line[:18] for line in lines] == ["[2026-03-03 09:00]", "[2026-03-06 18:00]"]
        assert abs(received - now_ms()) < 60_000  # the records keep real time
        assert abs(clock.shown(now_ms()) - friday) < 60_000  # "now", for the agent: Friday evening
    # the operator's transcript reads the same days, the replies included; its order stays real
    page = transcript(store, customer, sessions_dir=settings.sessions_dir)
    days = [(line.speaker, f"{datetime.fromtimestamp(line.shown_at / 1000, ZONE):%m-%d}") for line in page.lines]
    assert [d for d in days if d[0] != "agent-note"] == [
        ("buyer", "03-03"),
        ("assistant", "03-03"),
        ("buyer", "03-06"),
        ("assistant", "03-06"),
    ]


def test_a_real_platforms_message_times_never_move_the_shops_clock(store, settings, shop, transport, platform):
    with store.write() as conn:
        conn.execute("UPDATE account SET simulated = 0")
    customer = say(store, transport, platform, "什么时候发货？", at_ms=script_ms("2020-01-01T09:00:00+08:00"))
    result = answer(store, settings, customer)
    with store.read() as conn:
        assert conversation_clock(conn, customer) == REAL_TIME
    assert not batches(settings, result.session_id)[0].startswith("[2020-01-01")


def test_a_simulation_without_a_script_clock_runs_on_real_time(store, shop, transport, platform):
    customer = say(store, transport, platform, "你好")
    with store.read() as conn:
        assert conversation_clock(conn, customer) == REAL_TIME


def test_memory_folders_of_a_scripted_conversation_carry_script_times(store, settings, shop, transport, platform):
    memory_settings = settings.memory.model_copy(update={"allow_small_window": True})
    memory = MemoryEngine(MemoryStore(settings.memory_path), memory_settings, 1000, ZONE, False)
    start = script_ms("2025-06-03T09:00:00+08:00")  # a Tuesday, the year before
    texts = ["你好，在吗？", "今天下单什么时候发货？", "发什么快递？", "可以开发票吗", "这款是什么材质的？", "好的"]
    for day, text in enumerate(texts):
        message = platform.buyer_says("shop", "b1", "张三", text, at_ms=start + day * DAY_MS)
        customer = ingest_page(store, transport.page_of("shop", [message])).customer_ids[0]
        evaluate(store, customer, 1000)
        provider = RulesProvider(load_knowledge(None))
        result = run_turn(store, provider, customer, settings.sessions_dir, ZONE, settings.agent, memory_engine=memory)
        if result.archive_due:
            SessionJobs(store, settings.sessions_dir, memory, 60).run(customer, archive_job)
    folders = memory.store.folders(scope_of(customer))
    assert folders  # archived, and dated in the script's June 2025, not today
    assert all(start <= f.event_from <= f.event_to < start + len(texts) * DAY_MS for f in folders)


def test_one_page_with_two_script_times_keeps_each_message_on_its_own(store, settings, shop, transport, platform):
    tuesday, friday = script_ms("2026-03-03T09:00:00+08:00"), script_ms("2026-03-06T18:00:00+08:00")
    messages = [
        platform.buyer_says("shop", "b1", "张三", "周二的问题", at_ms=tuesday),
        platform.buyer_says("shop", "b1", "张三", "周五的问题", at_ms=friday),
    ]
    customer = ingest_page(store, transport.page_of("shop", messages)).customer_ids[0]
    first = answer(store, settings, customer)
    assert batches(settings, first.session_id)[0].splitlines()[:2] == [
        "[2026-03-03 09:00] [counterpart 张三] 周二的问题",
        "[2026-03-06 18:00] [counterpart 张三] 周五的问题",
    ]
    page = transcript(store, customer, sessions_dir=settings.sessions_dir)
    shown = [(line.text, f"{datetime.fromtimestamp(line.shown_at / 1000, ZONE):%m-%d}") for line in page.lines]
    assert shown[:2] == [("周二的问题", "03-03"), ("周五的问题", "03-06")]
    later = {day for line, (_, day) in zip(page.lines, shown, strict=True) if line.speaker != "buyer"}
    assert later == {"03-06"}  # what the shop did after the page: on the page's latest script time


def test_a_clock_kept_between_turns_reads_as_one_read_from_every_message(store, shop, transport, platform, monkeypatch):
    import runtime.agent.script_clock as clock_module

    def from_scratch(customer: int) -> ConversationClock:
        with monkeypatch.context() as scoped, store.read() as conn:
            scoped.setattr(clock_module, "_read", Lru(clock_module.KEPT))
            return conversation_clock(conn, customer)

    days = ["2026-03-03T09:00:00+08:00", "2026-03-03T09:05:00+08:00", "2026-03-06T18:00:00+08:00"]
    for day in days:
        customer = say(store, transport, platform, "什么时候发货？", at_ms=script_ms(day))
        with store.read() as conn:
            kept = conversation_clock(conn, customer)
        assert kept == from_scratch(customer)
    assert len(kept.anchors) == 3  # each script time moved the clock
    # a message from a host whose clock is behind: received before those already read
    customer = say(store, transport, platform, "还在吗？", at_ms=script_ms("2026-03-09T10:00:00+08:00"))
    with store.write() as conn:
        conn.execute("UPDATE inbound_message SET received_at = 1 WHERE id = (SELECT max(id) FROM inbound_message)")
    with store.read() as conn:
        kept = conversation_clock(conn, customer)
    assert kept == from_scratch(customer) and kept.anchors[0][0] == 1
