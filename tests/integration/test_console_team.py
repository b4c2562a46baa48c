"""The shop team's tools in the operator console, in real browsers (Debian's Chromium, driven by
Selenium): canned replies kept on their page and inserted from the reply box with `/`, rendered
for the buyer and the operator, and a private note one operator leaves that a second operator's
browser shows while the buyer never receives it (the console, the browser and their helpers are in
conftest.py)."""

from __future__ import annotations

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from runtime.customers.transcript import transcript
from runtime.inbound.ingest import ingest_page
from runtime.operators.accounts import Role, add_operator
from tests.integration.conftest import PASSWORD, after_submit, http_sign_in, lines, sign_in

GREETING = "{买家}您好，我是{客服}，很高兴为您服务"
SHIPPING = "{buyer}，您的订单48小时内发货"
NOTE = "买家要求周五前到货，已和仓库确认（勿告诉买家仓库名）"

pytestmark = pytest.mark.parametrize("broker_url", ["redis"], indirect=True)


def buyer(store, platform, transport, name: str) -> int:
    said = platform.buyer_says("shop", "b1", name, "在吗")
    [customer] = ingest_page(store, transport.page_of("shop", [said])).customer_ids
    return customer


def add_canned(driver: WebDriver, console: str, shortcut: str, body: str) -> None:
    driver.get(f"{console}/canned")
    driver.find_element(By.ID, "canned-shortcut").send_keys(shortcut)
    driver.find_element(By.ID, "canned-body").send_keys(body)
    driver.find_element(By.ID, "canned-save").click()


def offered(driver: WebDriver) -> list[str]:
    """The reply box's list of canned replies as shown now: `/shortcut text` per item ([] when hidden)."""
    return list(
        driver.execute_script(
            "const l = document.getElementById('canned-list');"
            " return !l || l.hidden ? [] : Array.from(l.querySelectorAll('li')).map("
            "  li => li.querySelector('.shortcut').textContent + ' ' + li.querySelector('.text').textContent"
            "  + (li.classList.contains('on') ? ' *' : ''))"
        )
    )


def box_text(driver: WebDriver) -> str:
    return str(driver.execute_script("return document.getElementById('text').value"))


def test_an_operator_inserts_canned_replies_with_slash_and_sends_them_filled_in(
    console, browser, store, shop, platform, transport
):
    customer = buyer(store, platform, transport, "张三")
    sign_in(browser, console, "alice")
    add_canned(browser, console, "/问候", GREETING)
    after_submit(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-shortcut="问候"]'))
    add_canned(browser, console, "发货", SHIPPING)
    after_submit(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-shortcut="发货"]'))

    browser.get(f"{console}/c/{customer}")
    box = browser.find_element(By.ID, "text")
    box.send_keys("/问")
    WebDriverWait(browser, 10).until(lambda d: offered(d) == ["/问候 张三您好，我是alice，很高兴为您服务 *"])
    box.send_keys(Keys.ENTER)  # picks it: no new line
    greeting = "张三您好，我是alice，很高兴为您服务"
    WebDriverWait(browser, 10).until(lambda d: box_text(d) == greeting and offered(d) == [])

    # On a new line, `/` alone lists every reply; the arrow keys choose, wrapping around.
    box.send_keys(Keys.ENTER, "/")
    WebDriverWait(browser, 10).until(lambda d: [o.split(" ")[0] for o in offered(d)] == ["/发货", "/问候"])
    box.send_keys(Keys.ARROW_DOWN)
    WebDriverWait(browser, 10).until(lambda d: offered(d)[1].endswith(" *"))
    box.send_keys(Keys.ARROW_DOWN, Keys.ENTER)
    both = greeting + "\n张三，您的订单48小时内发货"
    WebDriverWait(browser, 10).until(lambda d: box_text(d) == both)

    # A click picks too; a `/` inside a line is only a slash.
    box.send_keys(" 1/2")
    assert offered(browser) == []
    box.send_keys(Keys.ENTER, "/发")
    WebDriverWait(browser, 10).until(lambda d: len(offered(d)) == 1)
    browser.find_element(By.CSS_SELECTOR, "#canned-list li").click()
    WebDriverWait(browser, 10).until(lambda d: box_text(d).endswith("1/2\n张三，您的订单48小时内发货"))
    box.clear()
    box.send_keys("/问")
    WebDriverWait(browser, 10).until(lambda d: len(offered(d)) == 1)
    box.send_keys(Keys.ENTER)
    WebDriverWait(browser, 10).until(lambda d: box_text(d) == greeting)
    browser.find_element(By.ID, "send").click()
    WebDriverWait(browser, 10).until(lambda d: ("console-operator", greeting, "sent") in lines(d))
    assert [m.text for m in platform.received("shop")] == [greeting]  # the buyer gets it filled in


def test_the_canned_page_edits_deletes_refuses_a_taken_shortcut_and_lets_a_viewer_only_read(
    console, browser, store, shop, platform, transport
):
    customer = buyer(store, platform, transport, "李四")
    sign_in(browser, console, "alice")
    add_canned(browser, console, "问候", GREETING)
    after_submit(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-shortcut="问候"]'))
    add_canned(browser, console, "问候", "另一个")
    error = after_submit(browser).until(lambda d: d.find_elements(By.ID, "canned-error"))[0].text
    assert "KEFU_CANNED_REPLY_EXISTS" in error
    assert browser.find_element(By.ID, "canned-body").get_attribute("value") == "另一个"  # what was typed stays
    add_canned(browser, console, "typo", "{byuer}您好")
    error = after_submit(browser).until(lambda d: d.find_elements(By.ID, "canned-error"))[0].text
    assert "KEFU_CANNED_REPLY_INVALID" in error and "{byuer}" in error

    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-shortcut="问候"]')
    body = row.find_element(By.CSS_SELECTOR, ".canned-edit-body")
    body.clear()
    body.send_keys("{买家}，在的")
    row.find_element(By.CSS_SELECTOR, ".canned-edit-save").click()
    after_submit(browser).until(
        lambda d: (
            d.find_element(By.CSS_SELECTOR, 'tr[data-shortcut="问候"] .canned-edit-body').get_attribute("value")
            == "{买家}，在的"
        )
    )

    with httpx.Client(base_url=console, follow_redirects=True) as client:
        token = http_sign_in(client, "victor")  # a viewer: reads the page and searches, changes nothing
        page = client.get("/canned").text
        assert "{买家}，在的" in page and 'id="canned-add"' not in page and "canned-delete" not in page
        assert client.get(f"/c/{customer}/canned", params={"q": "问"}).json() == [
            {"id": 1, "shortcut": "问候", "text": "李四，在的"}
        ]
        assert client.get("/c/999999/canned", params={"q": "问"}).status_code == 404
        refused = client.post("/canned", data={"csrf": token, "shortcut": "x", "body": "y"}, follow_redirects=False)
        assert refused.status_code == 403 and "KEFU_ROLE_REQUIRED" in refused.text
        client.cookies.clear()
        assert client.get(f"/c/{customer}/canned", follow_redirects=False).status_code == 303  # to sign in

    browser.find_element(By.CSS_SELECTOR, 'tr[data-shortcut="问候"] .canned-delete').click()
    after_submit(browser).until(lambda d: d.find_elements(By.ID, "no-canned"))
    with store.read() as conn:
        actions = [tuple(r) for r in conn.execute("SELECT operator, action, detail FROM operator_action ORDER BY id")]
    assert actions == [
        ("alice", "canned-add", "问候"),
        ("alice", "canned-edit", "问候"),
        ("alice", "canned-delete", "问候"),
    ]


def test_a_note_is_shown_to_another_operator_and_never_reaches_the_buyer(
    settings, console, browser, other_browser, store, shop, platform, transport
):
    add_operator(store, "bob", Role.OPERATOR, PASSWORD)
    customer = buyer(store, platform, transport, "王五")
    sign_in(other_browser, console, "bob")  # bob has the conversation open: the note reaches him live
    other_browser.get(f"{console}/c/{customer}")
    assert not other_browser.find_elements(By.CSS_SELECTOR, "#notes li.note")
    sign_in(browser, console, "alice")
    browser.get(f"{console}/c/{customer}")
    browser.find_element(By.ID, "note-body").send_keys(NOTE)
    browser.find_element(By.ID, "add-note").click()
    after_submit(browser).until(lambda d: NOTE in d.find_element(By.ID, "notes").text)
    browser.find_element(By.ID, "text").send_keys("稍等，马上为您查询")
    browser.find_element(By.ID, "send").click()
    WebDriverWait(browser, 10).until(lambda d: ("console-operator", "稍等，马上为您查询", "sent") in lines(d))

    note_of = "const n = document.querySelector('#notes li.note'); return n && [n.querySelector('.author').textContent,"
    note_of += " n.querySelector('.text').textContent, n.querySelector('.at').textContent]"
    WebDriverWait(other_browser, 30).until(lambda d: d.execute_script(note_of))
    author, text, at = other_browser.execute_script(note_of)
    assert (author, text) == ("alice", NOTE) and at  # when, in the shop's time
    assert other_browser.find_elements(By.ID, "note-form")  # bob may add one too
    WebDriverWait(other_browser, 30).until(lambda d: ("console-operator", "稍等，马上为您查询", "sent") in lines(d))
    assert all(NOTE not in text for _, text, _ in lines(other_browser))  # not a transcript line

    assert [m.text for m in platform.received("shop")] == ["稍等，马上为您查询"]  # all the buyer ever got
    page = transcript(store, customer, sessions_dir=settings.sessions_dir)
    assert all(NOTE not in line.text for line in page.lines)
    with httpx.Client(base_url=console, follow_redirects=True) as client:
        token = http_sign_in(client, "victor")  # a viewer reads notes, adds none
        shown = client.get(f"/c/{customer}").text
        assert NOTE in shown and 'id="note-form"' not in shown
        refused = client.post(f"/c/{customer}/notes", data={"csrf": token, "body": "x"}, follow_redirects=False)
        assert refused.status_code == 403
        client.cookies.clear()
        token = http_sign_in(client, "alice")
        empty = client.post(f"/c/{customer}/notes", data={"csrf": token, "body": "  "})
        assert empty.status_code == 400 and "KEFU_NOTE_INVALID" in empty.text
        forged = client.post(f"/c/{customer}/notes", data={"body": "from another site"})  # no token
        assert forged.status_code == 403 and "KEFU_CSRF_INVALID" in forged.text
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM operator_note").scalar_one() == 1
