"""The console's reports in a real browser: a scripted day, played through the runtime at set
times, shows on /reports as counted by hand, in its plots, and in the CSV its link downloads."""

from __future__ import annotations

import csv
import io
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from selenium.webdriver.common.by import By

from runtime.admission.batches import evaluate
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.turn import run_turn
from runtime.customers.assignment import resolve, take_over
from runtime.inbound.ingest import ingest_page
from runtime.outbox.manual import ManualSend, send_manual
from runtime.outbox.requests import AttemptGrant, begin_attempt, record_sent
from runtime.ports import SendReceipt
from runtime.store.clock import clock_at
from tests.integration.conftest import after_submit, sign_in, text_of

pytestmark = pytest.mark.parametrize("broker_url", ["embedded"], indirect=True)

ZONE = ZoneInfo("Asia/Shanghai")
RULES = RulesProvider(load_knowledge(None))


def at(hour: int, minute: int, second: int = 0) -> int:
    return int(datetime(2026, 3, 2, hour, minute, second, tzinfo=ZONE).timestamp() * 1000)


def deliver(store, request_id: str, sent: int) -> None:
    with clock_at(sent):
        grant = begin_attempt(store, request_id, "test", 60)
        assert isinstance(grant, AttemptGrant)
        record_sent(store, request_id, grant.attempt_no, SendReceipt(platform_message_id=f"p-{request_id}"))


@pytest.fixture
def scripted_day(settings, store, shop, platform, transport) -> None:
    """The simulated shop's 2 March: b1 greeted by the agent in 30 s; b2 handed off by the agent,
    taken over by alice, answered in 5 minutes and resolved; b3 never answered."""

    def say(when: int, buyer: str, text: str) -> int:
        with clock_at(when):
            page = transport.page_of(shop, [platform.buyer_says(shop, buyer, buyer, text)])
            return ingest_page(store, page).customer_ids[0]

    def agent(when: int, customer: int) -> list[str]:
        replies: list[str] = []
        with clock_at(when):
            evaluate(store, customer, 1000)
            run_turn(store, RULES, customer, settings.sessions_dir, ZONE, settings.agent, on_registered=replies.append)
        return replies

    b1 = say(at(9, 0), "b1", "你好")
    [greeting] = agent(at(9, 0, 10), b1)
    deliver(store, greeting, at(9, 0, 30))
    b2 = say(at(10, 0), "b2", "这个能定制吗")
    assert agent(at(10, 0, 10), b2) == []  # handed off
    with clock_at(at(10, 1)):
        take_over(store, b2, "alice")
        send_manual(store, ManualSend(request_id="alice-1", customer_id=b2, text="可以定制", operator="alice"))
    deliver(store, "alice-1", at(10, 5))
    with clock_at(at(10, 6)):
        resolve(store, b2, "alice")
    say(at(11, 0), "b3", "在吗")


def test_a_viewer_reads_the_days_figures_plots_and_csv(console, browser, scripted_day):
    sign_in(browser, console, "victor")  # a viewer: reports are for every operator
    browser.get(f"{console}/reports")
    assert text_of(browser, "total-messages") == "0"  # today, real buyers: nothing yet
    browser.execute_script(
        "document.getElementById('report-from').value = '2026-03-02';"
        "document.getElementById('report-to').value = '2026-03-02';"
        "document.getElementById('report-source').value = 'simulation';"
    )
    browser.find_element(By.ID, "report-show").click()
    after_submit(browser).until(lambda d: "source=simulation" in d.current_url and text_of(d, "total-messages") != "0")
    assert "2026-03-02" in text_of(browser, "report-zone")
    shown = {key: text_of(browser, key) for key in ("total-messages", "total-conversations", "total-waits")}
    assert shown == {"total-messages": "3", "total-conversations": "3", "total-waits": "3"}
    assert text_of(browser, "total-answered") == "2"
    assert text_of(browser, "total-within") == "33%"  # b1 in 30 s; b2 in 5 min; b3 waiting
    seconds = browser.execute_script(
        "return ['first-auto-p50', 'first-human-p50', 'reply-human-p90']"
        ".map(id => document.getElementById(id).dataset.seconds)"
    )
    assert seconds == ["30.0", "300.0", "300.0"]
    assert (text_of(browser, "total-handoffs"), text_of(browser, "total-handoff-rate")) == ("1", "33%")
    assert text_of(browser, "total-resolved") == "1"
    alice = browser.find_element(By.CSS_SELECTOR, "tr.operator-row[data-operator='alice']")
    assert (alice.find_element(By.CLASS_NAME, "replies").text, alice.find_element(By.CLASS_NAME, "resolved").text) == (
        "1",
        "1",
    )
    # The hourly plot: a bar per hour, those of 9, 10 and 11 o'clock drawn (a tooltip each).
    bars = browser.execute_script(
        "return Array.from(document.querySelectorAll('#chart-hours rect.bar')).map(bar => [bar.dataset.label,"
        " bar.dataset.messages, bar.dataset.conversations, parseFloat(bar.getAttribute('height')),"
        " bar.querySelector('title').textContent])"
    )
    assert len(bars) == 24
    drawn = [(label, messages, conversations) for label, messages, conversations, height, _ in bars if height > 0]
    assert drawn == [("09:00", "1", "1"), ("10:00", "1", "1"), ("11:00", "1", "1")]
    assert all(tip.startswith(label) for label, *_, tip in bars)

    # The CSV its link downloads, with this session's cookie.
    downloaded = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(document.getElementById('report-csv').href)"
        ".then(r => r.text().then(text => done([r.status, r.headers.get('content-disposition'), text])));"
    )
    status, disposition, text = downloaded
    assert status == 200 and disposition == 'attachment; filename="kefu-report-simulation-2026-03-02-2026-03-02.csv"'
    rows = list(csv.DictReader(io.StringIO(text.lstrip("\ufeff"))))
    period = rows[0]
    assert (period["kind"], period["buyer_messages"], period["conversations"], period["waits"]) == (
        "period",
        "3",
        "3",
        "3",
    )
    assert (period["within_3min_share"], period["reply_auto_p50_s"], period["reply_human_p50_s"]) == (
        "0.3333",
        "30",
        "300",
    )
    assert [(r["operator"], r["replies_sent"], r["resolved"]) for r in rows if r["kind"] == "operator"] == [
        ("alice", "1", "1")
    ]


def test_a_bad_period_is_refused_by_code_and_signed_out_readers_sign_in(console, browser, scripted_day):
    browser.get(f"{console}/reports")
    assert browser.current_url.endswith("/login")
    sign_in(browser, console, "victor")
    browser.get(f"{console}/reports?from=2026-03-05&to=2026-03-02")
    assert "KEFU_INVALID_INPUT" in browser.page_source
