"""Simulation instances in the operator console, in a real browser (Debian's Chromium, driven by
Selenium): an operator makes a manual instance, types as its buyer, watches the agent (the rules
agent, served by a real Celery worker with its listeners, on Redis) answer, messages the agent
directly without the buyer seeing it, and stops the instance for good."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from celery import Celery
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from config import Settings
from runtime.store import DeliveryStore
from tests.integration.conftest import after_submit, http_sign_in, lines, sign_in, text_of
from tests.integration.helpers import worker_env
from transports.simulator import SimulatedPlatform
from transports.simulator.platform import InstanceState, SimInstance
from worker.celery_app import make_app
from worker.process import WorkerProcess
from worker.sample_shop import SAMPLE_SHOP
from worker.simulation import ensure_sample_shop

QUESTION = "请问什么时候发货？"
ANSWER = "现货商品在付款后48小时内发货，预售商品以页面标注的时间为准。"  # the sample FAQ's
TO_AGENT = "顾客要是问能不能开发票，你怎么回答？"
pytestmark = pytest.mark.parametrize("broker_url", ["redis"], indirect=True)


@pytest.fixture
def worker(settings: Settings, shop: str) -> Iterator[Celery]:
    """A worker with its listeners (the one that hears the simulator account's buyers), as
    `kefu simulate new --manual` expects beside it; the console hands work to it over Redis."""
    process = WorkerProcess(worker_env(settings), settings.data_dir / "worker.log", listen=True).start()
    app = make_app(settings)
    try:
        process.wait_ready(app)
        yield app
    finally:
        process.stop()


def manual_instance_page(
    console: str, browser: WebDriver, store: DeliveryStore, platform: SimulatedPlatform, operator: str
) -> SimInstance:
    """A manual instance on the sample shop, and the simulations page as `operator` sees it."""
    ensure_sample_shop(store)
    instance = platform.new_instance(SAMPLE_SHOP, "manual", "小周")
    sign_in(browser, console, operator)
    browser.get(f"{console}/simulations")
    return instance


def state_of(driver: WebDriver, instance_id: str) -> str:
    """An instance's state as the simulations page shows it (read in one script)."""
    script = f"const r = document.getElementById({instance_id!r}); return r ? r.dataset.state : ''"
    return str(driver.execute_script(script))


def fill(driver: WebDriver, selector: str, text: str) -> None:
    field = driver.find_element(By.CSS_SELECTOR, selector)
    field.clear()
    field.send_keys(text)


def conversation_link(driver: WebDriver, instance_id: str) -> bool:
    """Whether the page links the instance's conversation (once its first line is stored), reloading."""
    driver.refresh()
    return bool(driver.find_elements(By.CSS_SELECTOR, f"#{instance_id} a.conversation"))


def operator_dms(store: DeliveryStore) -> list[str]:
    with store.read() as conn:
        rows = conn.execute("SELECT body FROM inbound_message WHERE sender_role = 'operator-dm' ORDER BY id")
        return [row[0] for row in rows]


def test_an_operator_tries_the_agent_on_a_manual_instance_then_stops_it(
    worker: Celery, console: str, browser: WebDriver, store: DeliveryStore, platform: SimulatedPlatform
) -> None:
    sign_in(browser, console, "alice")
    browser.find_element(By.ID, "simulations-link").click()
    after_submit(browser).until(lambda d: text_of(d, "no-simulations") == "No simulation instances yet.")
    fill(browser, "#sim-buyer", "小林")
    browser.find_element(By.ID, "sim-new").click()
    after_submit(browser).until(lambda d: state_of(d, "sim-001") == "running")
    [instance] = platform.instances()
    assert (instance.kind, instance.account_id, instance.buyer_name) == ("manual", SAMPLE_SHOP, "小林")

    fill(browser, "#sim-001 .sim-say-text", QUESTION)
    browser.find_element(By.CSS_SELECTOR, "#sim-001 .sim-say").click()
    after_submit(browser).until(lambda d: d.current_url.endswith("/simulations#sim-001"))
    WebDriverWait(browser, 30, poll_frequency=0.5).until(lambda d: conversation_link(d, "sim-001"))
    browser.find_element(By.CSS_SELECTOR, "#sim-001 a.conversation").click()
    WebDriverWait(browser, 30).until(lambda d: ("assistant", ANSWER, "sent") in lines(d))
    assert ("buyer", QUESTION, "") in lines(browser)
    assert [r.text for r in platform.received_in(instance.conversation_id)] == [ANSWER]
    browser.get(f"{console}/?source=real")
    assert "小林" not in text_of(browser, "conversations")  # a real shop's list never shows an instance

    # The operator speaks to the agent under test: its answer is for the operator, the buyer gets nothing.
    browser.get(f"{console}/simulations")
    fill(browser, "#sim-001 .sim-dm-text", TO_AGENT)
    browser.find_element(By.CSS_SELECTOR, "#sim-001 .sim-dm").click()
    after_submit(browser).until(lambda d: ("operator-dm", TO_AGENT, "") in lines(d))  # on the conversation page
    WebDriverWait(browser, 30).until(
        lambda d: any(speaker == "agent-note" and "开电子普通发票" in text for speaker, text, _ in lines(d))
    )
    assert [r.text for r in platform.received_in(instance.conversation_id)] == [ANSWER]
    customer = int(browser.current_url.rsplit("/", 1)[1])
    with httpx.Client(base_url=console, follow_redirects=True) as client:  # one rendered form, submitted twice
        token = http_sign_in(client, "alice")
        request_id = re.search(r'name="request_id" value="([0-9a-f]{32})"', client.get("/simulations").text)[1]  # type: ignore[index]
        form = {"csrf": token, "request_id": request_id, "text": "再问一次：能开发票吗？"}
        landed = [client.post("/simulations/sim-001/dm", data=form).url.path for _ in range(2)]
    assert landed == [f"/c/{customer}"] * 2
    assert operator_dms(store) == [TO_AGENT, "再问一次：能开发票吗？"]  # the second submit changed nothing

    # A second page, loaded while the instance runs, still offers "say" once it is stopped.
    browser.get(f"{console}/simulations")
    stopping_tab = browser.current_window_handle
    browser.switch_to.new_window("tab")
    browser.get(f"{console}/simulations")
    stale_tab = browser.current_window_handle
    browser.switch_to.window(stopping_tab)
    browser.find_element(By.CSS_SELECTOR, "#sim-001 .sim-stop").click()
    WebDriverWait(browser, 20).until(lambda d: state_of(d, "sim-001") == "stopped")
    assert not browser.find_elements(By.CSS_SELECTOR, "#sim-001 form")  # nothing left to do with it
    assert platform.instance("sim-001").state == InstanceState.STOPPED

    browser.switch_to.window(stale_tab)
    fill(browser, "#sim-001 .sim-say-text", "还在吗")
    browser.find_element(By.CSS_SELECTOR, "#sim-001 .sim-say").click()
    after_submit(browser).until(lambda d: text_of(d, "refused").startswith("KEFU_SIMULATION_STOPPED: sim-001"))
    assert [m.text for m in platform.buyer_messages_in(instance.conversation_id)] == [QUESTION]


def test_a_viewer_can_neither_create_nor_stop_and_an_operator_sees_refusals_by_code(
    console: str, browser: WebDriver, store: DeliveryStore, platform: SimulatedPlatform
) -> None:
    instance = manual_instance_page(console, browser, store, platform, "victor")
    assert state_of(browser, instance.id) == "running"
    assert not browser.find_elements(By.CSS_SELECTOR, "#new-simulation, .sim-stop, .sim-say, .sim-dm")
    with httpx.Client(base_url=console, follow_redirects=True) as client:
        token = http_sign_in(client, "victor")
        created = client.post("/simulations/new", data={"csrf": token, "buyer_name": "x"})
        assert created.status_code == 403 and "KEFU_ROLE_REQUIRED" in created.text
        stopped = client.post(f"/simulations/{instance.id}/stop", data={"csrf": token})
        assert stopped.status_code == 403 and "KEFU_ROLE_REQUIRED" in stopped.text
        client.cookies.clear()
        token = http_sign_in(client, "alice")
        forged = client.post(f"/simulations/{instance.id}/stop", data={})  # another site's form
        assert forged.status_code == 403 and "KEFU_CSRF_INVALID" in forged.text
        unknown = client.post("/simulations/new", data={"csrf": token, "route": "no-such-route"})
        assert unknown.status_code == 400 and "KEFU_ROUTE_UNKNOWN: no direct route" in unknown.text
        early = client.post(f"/simulations/{instance.id}/dm", data={"csrf": token, "text": "你好"})
        assert early.status_code == 400 and "KEFU_SIMULATION_NO_CONVERSATION" in early.text
        assert "Traceback" not in early.text
    assert [(i.id, i.state) for i in platform.instances()] == [(instance.id, InstanceState.RUNNING)]


def test_a_stop_that_times_out_leaves_the_instance_stopping(
    console: str, browser: WebDriver, store: DeliveryStore, platform: SimulatedPlatform
) -> None:
    """No worker hears the buyer here: its line is never stored, so the conversation never goes quiet."""
    instance = manual_instance_page(console, browser, store, platform, "alice")
    fill(browser, f"#{instance.id} .sim-say-text", QUESTION)
    browser.find_element(By.CSS_SELECTOR, f"#{instance.id} .sim-say").click()
    after_submit(browser).until(lambda d: d.current_url.endswith(f"/simulations#{instance.id}"))
    browser.find_element(By.CSS_SELECTOR, f"#{instance.id} .sim-stop").click()
    WebDriverWait(browser, 30).until(lambda d: text_of(d, "refused").startswith("KEFU_SIMULATION_STOP_TIMEOUT"))
    browser.get(f"{console}/simulations")
    assert state_of(browser, instance.id) == "stopping"
    assert browser.find_element(By.CSS_SELECTOR, f"#{instance.id} .sim-stop").text == "finish stopping"
    assert not browser.find_elements(By.CSS_SELECTOR, f"#{instance.id} .sim-say")  # no more buyer input
