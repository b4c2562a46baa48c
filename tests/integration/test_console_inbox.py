"""Two operators share the console's live inbox in real browsers (Debian's Chromium), over the
store a real Celery worker answers buyers from: the list follows new messages, handoffs and
assignments without a reload, a handoff and a new message in one's own conversations raise a
notification and the tab's badge, and a take-over button never outlives another's take-over."""

from __future__ import annotations

import celery.contrib.testing.tasks  # noqa: F401  (registers celery.ping for start_worker)
import pytest
from celery.contrib.testing.worker import start_worker
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from runtime.customers.summaries import customer_of
from tests.integration.conftest import after_submit, sign_in, text_of
from tests.integration.helpers import wait_for
from worker.celery_app import make_app

pytestmark = pytest.mark.parametrize("broker_url", ["redis"], indirect=True)

_ROWS = """return Array.from(document.querySelectorAll('#rows tr[data-customer]')).map(tr => [
  tr.querySelector('a').textContent, tr.dataset.status, tr.querySelector('.assignee').textContent.trim(),
  tr.querySelector('.unread').textContent.trim()])"""


@pytest.fixture
def worker(settings, shop):
    app = make_app(settings)
    with start_worker(app, pool="solo", perform_ping_check=True, shutdown_timeout=30):
        yield app


def rows(driver) -> list[tuple[str, str, str, str]]:
    """(name, status, assignee, unread) of each listed conversation, read in one script."""
    return [tuple(row) for row in driver.execute_script(_ROWS)]


def toasts(driver) -> str:
    return text_of(driver, "toasts")


def notified(driver) -> int:
    """Browser notifications the page raised (the operator allowed them)."""
    return int(driver.execute_script("return Number(document.getElementById('toasts').dataset.notified || 0)"))


def buyer_says(worker, platform, transport, buyer: str, name: str, text: str) -> None:
    said = platform.buyer_says("shop", buyer, name, text)
    worker.send_task("kefu.ingest.page", args=[transport.page_of("shop", [said]).model_dump(mode="json")])


def test_two_operators_share_a_live_inbox(worker, console, browser, other_browser, store, platform, transport):
    buyer_says(worker, platform, transport, "b1", "张三", "什么时候发货？")
    wait_for(lambda: len(platform.received("shop")) == 1, 30, "the automatic reply")
    sign_in(browser, console, "alice")
    browser.get(f"{console}/?source=simulation")
    sign_in(other_browser, console, "ada")
    other_browser.get(f"{console}/?source=simulation&view=unassigned")
    assert [r[:3] for r in rows(browser)] == [("张三", "open", "")]
    WebDriverWait(browser, 10).until(lambda d: d.execute_script("return !!sessionStorage.getItem('kefu-seen-alice')"))

    # A buyer the agent cannot answer: it hands off. Both lists show it at the top, live, as
    # waiting; both operators are told; the tab says how many need them.
    buyer_says(worker, platform, transport, "b2", "李四", "我要投诉你们的店员")
    for driver in (browser, other_browser):
        WebDriverWait(driver, 30).until(lambda d: rows(d) and rows(d)[0][:2] == ("李四", "waiting"))
        WebDriverWait(driver, 10).until(lambda d: "waiting for a human: 李四" in toasts(d))
        WebDriverWait(driver, 10).until(lambda d: d.title.startswith("(1) "))
    assert notified(browser) >= 1 and notified(other_browser) >= 1
    wait_for(lambda: customer_of(store, "shop", "sim-direct-b2") is not None, 10, "李四's customer")
    li_si = customer_of(store, "shop", "sim-direct-b2")

    # alice opens 李四 while ada takes it over: alice's take-over button goes, live.
    browser.get(f"{console}/c/{li_si}")
    assert browser.find_elements(By.ID, "take-over")
    other_browser.get(f"{console}/c/{li_si}")
    other_browser.find_element(By.ID, "reason").send_keys("投诉")
    other_browser.find_element(By.ID, "take-over").click()
    after_submit(other_browser).until(lambda d: text_of(d, "assignee") == "assigned to ada")
    WebDriverWait(browser, 30).until(lambda d: "ada answers this buyer now" in text_of(d, "controls"))
    assert not browser.find_elements(By.ID, "take-over")
    assert "投诉" in text_of(browser, "handling") and text_of(browser, "assignee") == "assigned to ada"

    # ada's own conversation gets a new message: she is told, wherever she is.
    other_browser.get(f"{console}/ops")
    WebDriverWait(other_browser, 10).until(lambda d: d.title == "(1) operations · kefu console")  # 李四's complaint
    buyer_says(worker, platform, transport, "b2", "李四", "人呢？")
    WebDriverWait(other_browser, 30).until(lambda d: "new message from 李四" in toasts(d))
    WebDriverWait(other_browser, 10).until(lambda d: d.title.startswith("(2) "))  # 2 unread in hers, none waiting
    assert len(platform.received("shop")) == 1  # a human has it: the agent said nothing more

    # ada gives 张三 to alice; alice's "mine" list shows it without a reload.
    browser.get(f"{console}/?source=simulation&view=mine")
    assert rows(browser) == []
    zhang_san = customer_of(store, "shop", "sim-direct-b1")
    other_browser.get(f"{console}/c/{zhang_san}")
    Select(other_browser.find_element(By.ID, "assign-to")).select_by_value("alice")
    other_browser.find_element(By.ID, "assign").click()
    after_submit(other_browser).until(lambda d: text_of(d, "assignee") == "assigned to alice")
    WebDriverWait(browser, 30).until(lambda d: [r[:3] for r in rows(d)] == [("张三", "open", "alice")])

    # alice resolves it: resolved in the list; the buyer's next message reopens it, answered by the agent.
    browser.get(f"{console}/c/{zhang_san}")
    browser.find_element(By.ID, "resolve").click()
    after_submit(browser).until(lambda d: text_of(d, "conversation-status") == "resolved")
    browser.get(f"{console}/?source=simulation&status=resolved")
    assert [r[:2] for r in rows(browser)] == [("张三", "resolved")]
    buyer_says(worker, platform, transport, "b1", "张三", "什么时候发货？")
    WebDriverWait(browser, 30).until(lambda d: rows(d) == [])  # no longer resolved: reopened
    wait_for(lambda: len(platform.received("shop")) == 2, 30, "the agent's answer after the resolve")
    with store.read() as conn:
        actions = conn.execute("SELECT operator, action, customer_id FROM operator_action ORDER BY id").all()
    assert [tuple(a) for a in actions] == [
        ("ada", "take-over", li_si),
        ("ada", "assign", zhang_san),
        ("alice", "resolve", zhang_san),
    ]
