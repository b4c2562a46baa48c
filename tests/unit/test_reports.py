"""Reports (runtime.operators.reports): a scripted day of a shop, played through the real ingest,
agent, handoff, take-over, manual-send and resolve paths at set times, gives the figures counted
by hand below; the facts kept incrementally equal facts rebuilt from scratch, in small batches or
large; an erased buyer leaves them; a moved account's figures are the same on its new shard."""

from __future__ import annotations

import csv
import io
import math
import random
from collections import Counter
from datetime import date, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from config import Settings, load_settings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.batches import evaluate
from runtime.admission.routes import RouteSpec, create_route
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.turn import run_turn
from runtime.customers.assignment import resolve, take_over
from runtime.customers.erasure import erase_customer
from runtime.errors import KefuError
from runtime.inbound.ingest import ingest_page
from runtime.memory.store import MemoryStore
from runtime.operators.accounts import Role, add_operator
from runtime.operators.reports.export import report_csv
from runtime.operators.reports.facts import catch_up, reply_seconds
from runtime.operators.reports.figures import Counted, Report, Spread, build_report, spread
from runtime.operators.reports.periods import QUARTER_MS, Period, ZoneClock, period_of
from runtime.outbox.manual import ManualSend, send_manual
from runtime.outbox.requests import AttemptGrant, begin_attempt, record_failure, record_sent
from runtime.placement.shards import customer_id_base
from runtime.placement.slices import decode_slice, encode_slice, export_slice, import_slice, remove_slice
from runtime.ports import SendFailure, SendReceipt
from runtime.store import DeliveryStore
from runtime.store.clock import clock_at
from runtime.store.queries import report_activity, report_event, report_state
from transports.simulator import SimulatedPlatform, SimulatorTransport

ZONE = ZoneInfo("Asia/Shanghai")
DAY = date(2026, 3, 2)
SHOP = "tmall"  # a real account (the simulator's `shop` is simulated)
RULES = RulesProvider(load_knowledge(None))


def at(hour: int, minute: int, second: int = 0, day: int = 2) -> int:
    return int(datetime(2026, 3, day, hour, minute, second, tzinfo=ZONE).timestamp() * 1000)


class Script:
    """The shop's day, each step at its time on the core's clock."""

    def __init__(self, settings: Settings, store: DeliveryStore, platform: SimulatedPlatform) -> None:
        self.settings, self.store, self.platform = settings, store, platform
        self.transport = SimulatorTransport(platform)
        self.sent = 0

    def say(self, when: int, buyer: str, text: str, account: str = SHOP, origin: str = "live") -> int:
        with clock_at(when):
            page = self.transport.page_of(account, [self.platform.buyer_says(account, buyer, buyer, text)])
            return ingest_page(self.store, page, origin=origin).customer_ids[0] if origin == "live" else 0

    def agent(self, when: int, customer: int, sent: int | None) -> list[str]:
        """The agent's turn at `when`; its replies sent at `sent` (None: the platform refuses them)."""
        replies: list[str] = []
        with clock_at(when):
            evaluate(self.store, customer, 1000)
            s = self.settings
            run_turn(self.store, RULES, customer, s.sessions_dir, ZONE, s.agent, on_registered=replies.append)
        for request_id in replies:
            self.deliver(request_id, when, sent)
        return replies

    def human(self, when: int, customer: int, operator: str | None, text: str) -> None:
        self.sent += 1
        request_id = f"m{self.sent}"
        with clock_at(when):
            send_manual(
                self.store, ManualSend(request_id=request_id, customer_id=customer, text=text, operator=operator)
            )
        self.deliver(request_id, when, when)

    def deliver(self, request_id: str, begun: int, sent: int | None) -> None:
        with clock_at(begun):
            grant = begin_attempt(self.store, request_id, "test", 60)
        assert isinstance(grant, AttemptGrant)
        with clock_at(sent or begun + 5000):
            if sent is None:
                record_failure(self.store, request_id, grant.attempt_no, SendFailure("rejected", "REFUSED"))
            else:
                record_sent(
                    self.store, request_id, grant.attempt_no, SendReceipt(platform_message_id=f"p-{request_id}")
                )


def play(script: Script, checkpoints: bool = False) -> dict[str, int]:
    """The scripted day of 2026-03-02; with `checkpoints`, the report facts catch up after every
    step (as a console open all day would), else once at the end. The customers by letter."""
    store = script.store

    def step(now: int) -> None:
        if checkpoints:
            with clock_at(now):
                catch_up(store, ZONE)

    c: dict[str, int] = {}
    # F: a wait of the day before, answered after midnight; then the day's first, answered by the agent.
    c["F"] = script.say(at(23, 59, 0, day=1), "F", "在吗")
    script.agent(at(0, 0, 10), c["F"], sent=at(0, 0, 30))
    step(at(0, 0, 40))
    c["F"] = script.say(at(0, 30), "F", "发货了吗")
    script.agent(at(0, 30, 20), c["F"], sent=at(0, 30, 40))  # 40 s, automatic, F's first of the day
    step(at(0, 30, 50))
    script.say(at(8, 0), "F", "去年的聊天记录", origin="history")  # history: not the day's work
    # A: greeted in 20 s; then two lines answered together in 90 s.
    c["A"] = script.say(at(9, 0), "A", "你好")
    script.agent(at(9, 0, 10), c["A"], sent=at(9, 0, 20))
    step(at(9, 0, 30))
    script.say(at(9, 5), "A", "什么时候发货")
    script.say(at(9, 5, 30), "A", "顺丰可以吗")
    script.agent(at(9, 6), c["A"], sent=at(9, 6, 30))
    step(at(9, 7))
    # B: nothing in the FAQ, so the agent hands off; alice takes over, answers in 4.5 min, then
    # in 1 min, and resolves.
    c["B"] = script.say(at(10, 0), "B", "这个能定制吗")
    assert script.agent(at(10, 0, 10), c["B"], sent=None) == []  # a handoff, no reply
    with clock_at(at(10, 2)):
        take_over(store, c["B"], "alice")
    script.human(at(10, 4, 30), c["B"], "alice", "可以定制，请发图片")
    script.say(at(10, 10), "B", "好的，谢谢")
    script.human(at(10, 11), c["B"], "alice", "不客气")
    with clock_at(at(10, 12)):
        resolve(store, c["B"], "alice")
    step(at(10, 12))
    # C: nobody answers (still waiting at the report, long past 3 minutes).
    c["C"] = script.say(at(14, 0), "C", "你们有实体店吗")
    # E: the agent's reply is refused by the platform; bob answers in 2 min, then writes again.
    c["E"] = script.say(at(15, 0), "E", "退款怎么弄")
    script.agent(at(15, 0, 10), c["E"], sent=None)
    script.human(at(15, 2), c["E"], "bob", "我来帮您处理退款")
    script.human(at(15, 3), c["E"], "bob", "已经提交了")  # nobody was waiting: a reply, no wait
    step(at(15, 3))
    # G: answered from the CLI (no operator's name) in 1 min.
    c["G"] = script.say(at(16, 0), "G", "你好")
    script.human(at(16, 1), c["G"], None, "您好")
    # D: writes just before the report is made: not judged yet.
    c["D"] = script.say(at(22, 58, 30), "D", "在吗")
    step(at(22, 59))
    # A simulated buyer on the simulator's shop, answered by the agent: never in the real report.
    c["sim"] = script.say(at(11, 0), "s1", "你好", account="shop")
    script.agent(at(11, 0, 5), c["sim"], sent=at(11, 0, 8))
    with store.read() as conn:
        c["sim_message"] = conn.execute("SELECT max(id) FROM inbound_message").scalar_one()
    return c


def the_day(store: DeliveryStore, source: str = "real") -> Report:
    with clock_at(at(23, 0)):
        return build_report(store, period_of(ZONE, "2026-03-02", "2026-03-02"), source)  # type: ignore[arg-type]


@pytest.fixture
def day(settings: Settings, store: DeliveryStore, shop: str, platform: SimulatedPlatform) -> dict[str, int]:
    create_account(store, AccountSpec(id=SHOP, platform="wangwang", identity="seller-9"))
    create_route(store, RouteSpec(id="tmall-direct", account_id=SHOP, conversation_type="direct"), op_id="op-t")
    for name in ("alice", "bob"):
        add_operator(store, name, Role.OPERATOR, "password-1")
    return play(Script(settings, store, platform))


def test_a_scripted_day_gives_the_figures_counted_by_hand(store, day):
    report = the_day(store)
    t = report.totals
    # Buyer messages: F 1 (the day before's and the history import are not the day's), A 3, B 2,
    # C 1, E 1, G 1, D 1; conversations: those seven buyers.
    assert (t.messages, t.conversations) == (10, 7)
    hours = {h.start.hour: (h.messages, h.conversations) for h in report.hours if h.messages}
    assert hours == {0: (1, 1), 9: (3, 1), 10: (2, 1), 14: (1, 1), 15: (1, 1), 16: (1, 1), 22: (1, 1)}
    assert len(report.hours) == 24 and report.hours[0].start == datetime(2026, 3, 2, tzinfo=ZONE)
    # Waits: F 40 s auto; A 20 s and 90 s auto; B 270 s and 60 s human; E 120 s human (the
    # refused automatic reply ended nothing); G 60 s human; C and D still waiting.
    assert (t.waits, t.answered) == (9, 7)
    # Within 3 minutes: all answered but B's 270 s; judged: the answered and C (D is 30 s old).
    assert (t.within_3min, t.judged, t.within_3min_share) == (6, 8, 0.75)
    # First waits of the day: F 40 auto, A 20 auto; B 270, E 120, G 60 human (C and D unanswered).
    assert t.first_response.auto.model_dump() == {"count": 2, "p50_s": 20.0, "p90_s": 40.0}
    assert t.first_response.human.model_dump() == {"count": 3, "p50_s": 120.0, "p90_s": 270.0}
    assert t.reply_time.auto.model_dump() == {"count": 3, "p50_s": 40.0, "p90_s": 90.0}
    assert t.reply_time.human.model_dump() == {"count": 4, "p50_s": 60.0, "p90_s": 270.0}
    # B was handed off (alice's take-over is not a handoff of its own) and resolved.
    assert (t.handoffs, t.handoff_rate, t.resolved) == (1, pytest.approx(1 / 7), 1)
    operators = [(o.operator, o.replies, o.reply_time.p50_s, o.reply_time.p90_s, o.resolved) for o in report.operators]
    assert operators == [("alice", 2, 60.0, 270.0, 1), ("bob", 2, 120.0, 120.0, 0), (None, 1, 60.0, 60.0, 0)]
    [only] = report.days
    assert only.day == DAY and only.model_dump(exclude={"day"}) == t.model_dump()


def test_simulated_and_real_rows_never_mix_and_other_days_are_apart(store, day):
    simulated = the_day(store, "simulation").totals
    assert (simulated.messages, simulated.conversations, simulated.waits) == (1, 1, 1)
    assert simulated.reply_time.auto.p50_s == 8.0 and simulated.reply_time.human.count == 0
    assert simulated.resolved == simulated.handoffs == 0
    with clock_at(at(23, 0)):
        both = build_report(store, period_of(ZONE, "2026-03-01", "2026-03-02"))
    first, second = both.days
    # F's line at 23:59 of the 1st, answered after midnight: a wait of the 1st, and its first.
    assert (first.messages, first.conversations, first.waits, first.reply_time.auto.p90_s) == (1, 1, 1, 90.0)
    assert first.first_response.auto.count == 1
    assert second.model_dump(exclude={"day"}) == the_day(store).totals.model_dump()
    assert both.totals.conversations == 7  # F wrote on both days: one conversation of the period
    assert (both.totals.messages, both.totals.waits, len(both.hours)) == (11, 10, 48)


def test_facts_kept_all_day_equal_facts_rebuilt_at_night_in_any_batch_size(
    tmp_path: Path, settings, store, day, platform
):
    once = the_day(store).model_dump(exclude={"as_of"})
    again = load_settings(data_dir=tmp_path / "again")
    other = DeliveryStore(again.delivery_path, again.delivery)
    create_account(other, AccountSpec(id="shop", platform="simulator", identity="seller-1"))
    create_route(other, RouteSpec(id="all-direct", account_id="shop", conversation_type="direct"), op_id="op-all")
    create_account(other, AccountSpec(id=SHOP, platform="wangwang", identity="seller-9"))
    create_route(other, RouteSpec(id="tmall-direct", account_id=SHOP, conversation_type="direct"), op_id="op-t")
    for name in ("alice", "bob"):
        add_operator(other, name, Role.OPERATOR, "password-1")
    play(Script(again, other, SimulatedPlatform(again.simulator_path)), checkpoints=True)
    assert the_day(other).model_dump(exclude={"as_of"}) == once
    with clock_at(at(23, 0)):
        rebuilt = catch_up(other, ZoneInfo("UTC"), batch=2)  # another zone: everything again, two at a time
        assert rebuilt.rebuilt and rebuilt.transactions > 5
        assert catch_up(other, ZONE, batch=3).rebuilt
    assert the_day(other).model_dump(exclude={"as_of"}) == once
    with clock_at(at(23, 0)):
        assert catch_up(other, ZONE).transactions == 0  # nothing new: only read
    other.close()


def test_an_erased_buyer_leaves_the_figures(settings, store, day):
    memory = MemoryStore(settings.memory_path)
    erase_customer(store, memory, settings.sessions_dir, settings.memory_images_dir, day["B"], "tester")
    t = the_day(store).totals
    assert (t.messages, t.conversations, t.waits, t.handoffs, t.resolved) == (8, 6, 7, 0, 0)
    assert t.reply_time.human.model_dump() == {"count": 2, "p50_s": 60.0, "p90_s": 120.0}
    assert [o.operator for o in the_day(store).operators] == ["bob", None]
    # The simulated buyer's line is the newest message: erased, its id is given again, and the
    # message that gets it still counts.
    erase_customer(store, memory, settings.sessions_dir, settings.memory_images_dir, day["sim"], "tester")
    memory.close()
    assert the_day(store, "simulation").totals.messages == 0
    Script(settings, store, SimulatedPlatform(settings.simulator_path)).say(at(22, 59), "H", "在吗")
    with store.read() as conn:
        reused = conn.execute("SELECT max(id) FROM inbound_message").scalar_one()
    assert reused == day["sim_message"]
    assert the_day(store).totals.messages == 9


def test_a_moved_account_has_the_same_figures_on_its_new_shard(tmp_path: Path, settings, store, day):
    before = the_day(store).model_dump(exclude={"as_of"})
    there = load_settings(data_dir=tmp_path / "b", shard="shard-b")
    target = DeliveryStore(there.delivery_path, there.delivery, customer_id_base=customer_id_base("shard-b"))
    create_account(target, AccountSpec(id="other", platform="simulator", identity="seller-2"))
    create_route(target, RouteSpec(id="other-direct", account_id="other", conversation_type="direct"), op_id="op-o")
    for n in range(3):
        Script(there, target, SimulatedPlatform(there.simulator_path)).say(at(12, n), f"x{n}", "你好", account="other")
    assert the_day(target, "simulation").totals.messages == 3  # kept past message ids the move gives again
    memory, memory_there = MemoryStore(settings.memory_path), MemoryStore(there.memory_path)
    moved = decode_slice(encode_slice(export_slice(store, memory, settings.sessions_dir, None, SHOP, "a", 7)))
    import_slice(target, memory_there, there.sessions_dir, None, moved, "move-1", "shard-b", None)
    remove_slice(store, memory, settings.sessions_dir, None, SHOP, "shard-b", 7)
    memory.close()
    memory_there.close()
    assert the_day(target).model_dump(exclude={"as_of"}) == before
    assert the_day(target, "simulation").totals.messages == 3
    gone = the_day(store).totals
    assert (gone.messages, gone.waits, gone.handoffs, gone.resolved) == (0, 0, 0, 0)
    target.close()


def test_the_csv_carries_the_same_figures(store, day):
    report = the_day(store)
    rows = list(csv.DictReader(io.StringIO(report_csv(report))))
    period = rows[0]
    assert period["kind"] == "period" and period["start"] == "2026-03-02T00:00+08:00"
    assert (period["buyer_messages"], period["conversations"], period["within_3min_share"]) == ("10", "7", "0.7500")
    assert (period["first_response_human_p50_s"], period["reply_human_p90_s"], period["handoffs"]) == (
        "120",
        "270",
        "1",
    )
    assert [r["kind"] for r in rows].count("hour") == 24
    nine = next(r for r in rows if r["kind"] == "hour" and r["start"] == "2026-03-02T09:00+08:00")
    assert (nine["end"], nine["buyer_messages"], nine["conversations"]) == ("2026-03-02T10:00+08:00", "3", "1")
    alice = next(r for r in rows if r["kind"] == "operator" and r["operator"] == "alice")
    assert (alice["replies_sent"], alice["reply_p50_s"], alice["reply_p90_s"], alice["resolved"]) == (
        "2",
        "60",
        "270",
        "1",
    )


def test_the_cli_prints_the_report_and_its_csv(store, day, kefu):
    from worker.cli import cli

    with clock_at(at(23, 0)):
        shown = kefu.invoke(cli, ["report", "--from", "2026-03-02", "--to", "2026-03-02"], env={"COLUMNS": "200"})
        exported = kefu.invoke(cli, ["report", "--from", "2026-03-02", "--csv"], env={"COLUMNS": "200"})
        bad = kefu.invoke(cli, ["report", "--from", "2026-03-05", "--to", "2026-03-02"])
    assert shown.exit_code == 0, shown.output
    for figure in ("2026-03-02", "75%", "6/8"):  # the period, the share within 3 minutes, of how many
        assert figure in shown.output
    assert "alice" in shown.output and "bob" in shown.output
    lines = exported.output.splitlines()
    assert exported.exit_code == 0 and lines[0].startswith("kind,start,end,operator,buyer_messages")
    assert lines[1].startswith("period,2026-03-02T00:00+08:00,2026-03-03T00:00+08:00,,10,7,9,7,6,0.7500")
    assert bad.exit_code == 2 and "KEFU_INVALID_INPUT" in bad.output


@pytest.mark.parametrize(
    ("first", "last", "problem"),
    [
        ("2026-3-2x", None, "YYYY-MM-DD"),
        ("2026-03-05", "2026-03-02", "before its first day"),
        ("2026-01-01", "2026-03-02", "at most 31 days"),
    ],
)
def test_a_period_that_is_no_day_or_too_long_is_refused_by_code(first, last, problem):
    with pytest.raises(KefuError) as refused:
        period_of(ZONE, first, last)
    assert refused.value.code == "KEFU_INVALID_INPUT" and problem in refused.value.message


def test_a_period_is_whole_days_of_the_zone_and_a_day_the_clocks_change_has_its_hours():
    with clock_at(at(23, 0)):
        assert period_of(ZONE) == Period(first_day=DAY, last_day=DAY, zone="Asia/Shanghai")
        assert period_of(ZONE, "2026-03-01").last_day == DAY
    spring = Period(first_day=date(2026, 3, 8), last_day=date(2026, 3, 8), zone="America/New_York")
    assert len(spring.hours()) == 23 and spring.end - spring.start == 23 * 3600 * 1000
    india = Period(first_day=DAY, last_day=DAY, zone="Asia/Kolkata")
    assert [h % 3600_000 for h in india.hours()] == [1800_000] * 24  # hours begin at :30 UTC


def test_reply_times_are_counted_to_the_second_then_coarser():
    samples = [0, 1, 999, 1000, 1001, 119_001, 120_000, 120_001, 178_200, 180_000, 180_001, 271_000]
    samples += [599_999, 600_001, 3_599_000, 3_600_001, 7_777_777]
    counted = [reply_seconds(ms) for ms in samples]
    assert counted == [0, 1, 1, 1, 2, 120, 120, 125, 180, 180, 185, 275, 600, 630, 3600, 3900, 7800]


SUMMARIES = (
    "report_hour",
    "report_day",
    "report_reply_time",
    "report_operator_time",
    "report_operator_ever",
    "report_operator_replies",
)


def summaries(store: DeliveryStore) -> tuple[dict[str, Counter], dict[str, Counter]]:
    """The summaries V24's triggers keep (table -> its rows' keys -> their last column, the count),
    and the same counted again from the facts, as the tables' comments define them."""
    with store.read() as conn:
        kept = {t: Counter({tuple(r[:-1]): r[-1] for r in conn.execute(f"SELECT * FROM {t}")}) for t in SUMMARIES}
        kept["report_reply_time"] = Counter(  # two counts: waits, and of them first waits of the day
            {tuple(r[:-2]): (r[-2], r[-1]) for r in conn.execute("SELECT * FROM report_reply_time")}
        )
        activity = conn.execute("SELECT customer_id, hour_at, account_id, day_at, messages FROM report_activity").all()
        waits = conn.execute(
            "SELECT day_at, origin, seconds, first_of_day, account_id, coalesce(operator, ''), answered_day,"
            " started_at, answered_at FROM reply_wait"
        ).all()
        handoffs = conn.execute(
            "SELECT customer_id, at, wrote_before, wrote_after FROM report_event WHERE kind = 'handoff'"
        ).all()
    kept["handoff hours"] = Counter({(c, at): (before, after) for c, at, before, after in handoffs})
    counted: dict[str, Counter] = {t: Counter() for t in [*SUMMARIES, "handoff hours"]}
    for customer, when, _, _ in handoffs:  # its conversation's nearest hours with buyer messages
        hours = sorted(h for c, h, _, _, _ in activity if c == customer)
        before, after = [h for h in hours if h <= when], [h for h in hours if h > when]
        counted["handoff hours"][customer, when] = (before[-1] if before else None, after[0] if after else None)
    messages: Counter = Counter()
    days: dict[tuple[int, str], set[int]] = {}
    for customer, hour, account, day, n in activity:
        messages[hour, account] += n
        days.setdefault((customer, account), set()).add(day)
    for _, hour, account, _, _ in activity:  # report_hour's key: hour, account, messages
        counted["report_hour"][hour, account, messages[hour, account]] += 1
    for (_, account), seen in days.items():
        ordered = sorted(seen)
        for before, day in zip([0, *ordered], ordered, strict=False):
            counted["report_day"][day, account, before] += 1
    for day, origin, seconds, first, account, operator, sent_day, started, answered in waits:
        if seconds is not None:
            assert seconds == reply_seconds(answered - started)
            waits, firsts = counted["report_reply_time"].get((day, origin, seconds, account), (0, 0))
            counted["report_reply_time"][day, origin, seconds, account] = (waits + 1, firsts + first)
            if origin == "manual":
                counted["report_operator_time"][operator, seconds, account, day] += 1
                counted["report_operator_ever"][operator, seconds, account] += 1
        if origin == "manual":
            counted["report_operator_replies"][sent_day, operator, account] += 1
    return kept, counted


def test_the_summaries_are_a_count_of_the_facts_through_a_day_a_new_zone_an_erasure_and_a_move(
    tmp_path: Path, settings, store, day
):
    the_day(store)
    kept, counted = summaries(store)
    assert kept == counted and all(kept.values())
    with clock_at(at(23, 0)):
        assert catch_up(store, ZoneInfo("America/New_York")).rebuilt  # summaries emptied wholesale, counted again
    kept, counted = summaries(store)
    assert kept == counted and all(kept.values())
    the_day(store)  # back in the shop's zone
    memory = MemoryStore(settings.memory_path)
    erase_customer(store, memory, settings.sessions_dir, settings.memory_images_dir, day["B"], "tester")
    kept, counted = summaries(store)
    assert kept == counted
    assert [key for key in kept["report_operator_ever"] if key[0] == "alice"] == []  # B's waits were hers
    there = load_settings(data_dir=tmp_path / "b", shard="shard-b")
    target = DeliveryStore(there.delivery_path, there.delivery, customer_id_base=customer_id_base("shard-b"))
    memory_there = MemoryStore(there.memory_path)
    moved = decode_slice(encode_slice(export_slice(store, memory, settings.sessions_dir, None, SHOP, "a", 7)))
    import_slice(target, memory_there, there.sessions_dir, None, moved, "move-1", "shard-b", None)
    remove_slice(store, memory, settings.sessions_dir, None, SHOP, "shard-b", 7)
    memory.close()
    memory_there.close()
    the_day(target)
    for shard in (store, target):
        kept, counted = summaries(shard)
        assert kept == counted
    assert [key for rows in summaries(store)[0].values() for key in rows if SHOP in key] == []  # gone with it
    moved_hours = summaries(target)[0]["report_hour"]
    assert sum(key[2] for key in moved_hours if key[1] == SHOP) == 8 + 1  # the day's 8, F's of the 1st
    target.close()


def test_a_period_counts_each_conversation_once_in_whatever_order_its_hours_come_and_go(store):
    """Hours of three conversations on six days added and deleted at random (a moved account's
    old messages arrive after newer ones; an erasure takes hours from between others): after
    each change the summaries are a count of the facts, and each day's and every period's
    conversations are those with an hour in it."""
    day_ms, rng = 86_400_000, random.Random(41)
    base = at(0, 0) // day_ms  # days from here on (an hour's day is its number's: UTC days will do)
    held: set[tuple[int, int]] = set()  # (customer, hour)
    handoffs = [(c, day * day_ms + rng.randrange(day_ms)) for c in range(3) for day in range(base, base + 6, 2)]
    with store.write() as conn:  # facts are kept; handoffs of each conversation on every other day
        conn.execute(report_state.SAVE, {"zone": "UTC", "m": 0, "s": 0, "at": 0})
        for customer, when in handoffs:
            conn.execute(
                "INSERT INTO report_event (customer_id, at, kind, account_id) VALUES (?, ?, 'handoff', ?)",
                (customer, when, f"shop-{customer % 2}"),
            )
    for _ in range(300):
        customer, day, hour = rng.randrange(3), base + rng.randrange(6), rng.choice([0, 5, 23])
        key = (customer, day * day_ms + hour * 3_600_000)
        with store.write() as conn:
            if key in held and rng.random() < 0.4:
                conn.execute("DELETE FROM report_activity WHERE customer_id = ? AND hour_at = ?", key)
                held.discard(key)
            else:
                conn.execute(report_activity.ADD, (*key, f"shop-{customer % 2}", day * day_ms, rng.randint(1, 3)))
                held.add(key)
        kept, counted = summaries(store)
        assert kept == counted
        active = {(c, h // day_ms) for c, h in held}  # (customer, day)
        with store.read() as conn:
            for first in range(base, base + 6):
                for last in range(first, base + 6):
                    bounds = {"sim": False, "from": first * day_ms, "to": (last + 1) * day_ms}
                    found = conn.execute(report_activity.CONVERSATIONS, bounds).scalar_one()
                    assert found == len({c for c, d in active if first <= d <= last})
                    handed = {c for c, _ in conn.execute(report_event.HANDOFFS, bounds)}
                    wrote = {c for c, d in active if first <= d <= last}
                    assert handed == {c for c, w in handoffs if first <= w // day_ms <= last and c in wrote}
            bounds = {"sim": False, "from": base * day_ms, "to": (base + 6) * day_ms}
            daily = dict(conn.execute(report_activity.DAYS, bounds).all())
        assert daily == {d * day_ms: n for d, n in Counter(d for _, d in active).items()}


def test_a_spread_of_several_days_is_the_nearest_rank_of_all_their_waits():
    """`spread` finds percentiles over days' counts without merging them: the same waits, as
    one sorted list, give the same count, median and 90th percentile."""
    rng = random.Random(7)
    for _ in range(200):
        parts, every = [], []
        for _ in range(rng.randint(1, 6)):
            times = sorted(rng.sample(range(1, 400), rng.randint(0, 12)))
            waits = [rng.randint(0, 3) for _ in times]  # a first-waits count may be 0 at a reply time
            parts.append(Counted(times, waits))
            every += [t for t, n in zip(times, waits, strict=True) for _ in range(n)]
        every.sort()
        found = spread(parts)
        if not every:
            assert found == Spread()
            continue
        rank = {p: every[max(math.ceil(p * len(every)), 1) - 1] for p in (0.5, 0.9)}
        assert (found.count, found.p50_s, found.p90_s) == (len(every), rank[0.5], rank[0.9])
        assert sum(part.within(180) for part in parts) == len([t for t in every if t <= 180])
    every, first = Counted.of_json("[30, 5, 12]", "[1, 2, 3]", "[0, 1, 1]")  # out of order: put in order
    assert (every.seconds, every.upto_each, first.upto_each) == ([5, 12, 30], [2, 5, 6], [1, 2, 2])


@pytest.mark.parametrize(
    ("zone", "month"),
    [("Asia/Shanghai", 3), ("America/New_York", 3), ("America/New_York", 11), ("Australia/Lord_Howe", 4)],
)
def test_a_periods_hours_are_those_its_quarter_hours_begin_in(zone, month):
    """Hours counted from each midnight (days whose clocks move by whole hours, or not) are the
    hours found quarter by quarter; Lord Howe's half-hour change is looked at quarter by quarter."""
    period = Period(first_day=date(2026, month, 1), last_day=date(2026, month, 28), zone=zone)
    clock = ZoneClock(period.tz)
    quarters = sorted({clock.starts(t)[0] for t in range(period.start, period.end, QUARTER_MS)})
    assert period.hours() == quarters
