"""The operator console in a real browser (Debian's Chromium, driven by Selenium), served by
uvicorn over the store a real Celery worker answers buyers from (the console, the browser and
their helpers are in conftest.py, shared with test_console_simulations.py)."""

from __future__ import annotations

import base64
import re

import celery.contrib.testing.tasks  # noqa: F401  (registers celery.ping for start_worker)
import httpx
import pytest
from celery.contrib.testing.worker import start_worker
from prometheus_client.parser import text_string_to_metric_families
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from runtime.admission.handling import pause_handling
from runtime.inbound.ingest import ingest_page
from runtime.operators.accounts import Role, add_operator
from runtime.outbox.manual import ManualSend, send_manual
from runtime.outbox.requests import begin_attempt, record_failure
from runtime.ports import SendFailure
from tests.integration.conftest import PASSWORD, after_submit, http_sign_in, lines, sign_in, text_of
from tests.integration.helpers import wait_for
from transports.simulator.platform import BuyerMedia
from worker.celery_app import FAMILIES, make_app, queue_name

# A 1x1 PNG: what a buyer's photo looks like to the pipeline.
TINY_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4//8/AwAI/AL+hc2rNAAAAABJRU5ErkJggg=="
)

pytestmark = pytest.mark.parametrize("broker_url", ["redis"], indirect=True)


@pytest.fixture
def worker(settings, shop):
    app = make_app(settings)
    with start_worker(app, pool="solo", perform_ping_check=True, shutdown_timeout=30):
        yield app


def test_an_operator_watches_live_takes_over_and_sends(worker, console, browser, store, platform, transport):
    first = platform.buyer_says("shop", "b1", "张三", "什么时候发货？")
    worker.send_task("kefu.ingest.page", args=[transport.page_of("shop", [first]).model_dump(mode="json")])
    wait_for(lambda: len(platform.received("shop")) == 1, 30, "the automatic reply")
    sign_in(browser, console, "alice")
    browser.get(f"{console}/?source=simulation")
    browser.find_element(By.LINK_TEXT, "张三").click()
    assert browser.find_element(By.ID, "conversation-name").text.startswith("张三")
    WebDriverWait(browser, 10).until(lambda d: ("assistant", platform.received("shop")[0].text, "sent") in lines(d))

    # A new buyer line, and its answer, appear without a reload.
    second = platform.buyer_says("shop", "b1", "张三", "<script>window.pwned = 1</script>发什么快递？")
    worker.send_task("kefu.ingest.page", args=[transport.page_of("shop", [second]).model_dump(mode="json")])
    WebDriverWait(browser, 30).until(lambda d: ("buyer", second.text, "") in lines(d))  # the tag shown as text
    browser.refresh()  # rendered by the server this time, where an unescaped tag would run
    assert ("buyer", second.text, "") in lines(browser)
    assert browser.execute_script("return window.pwned === undefined")
    WebDriverWait(browser, 30).until(
        lambda d: [s for s, _, state in lines(d) if state == "sent"].count("assistant") == 2
    )

    browser.find_element(By.ID, "reason").send_keys("VIP")
    browser.find_element(By.ID, "take-over").click()
    after_submit(browser).until(
        lambda d: "VIP" in text_of(d, "handling") and text_of(d, "assignee") == "assigned to alice"
    )
    browser.find_element(By.ID, "text").send_keys("您好，我是店长，马上为您安排。")
    browser.find_element(By.ID, "send").click()
    WebDriverWait(browser, 10).until(
        lambda d: ("console-operator", "您好，我是店长，马上为您安排。", "sent") in lines(d)
    )
    # Read in one script: the live view may replace the lines at any moment.
    label = browser.execute_script("return document.querySelector('#lines li.console-operator .label').textContent")
    assert label == "operator alice (console)"  # the suite's language: English
    assert platform.received("shop")[-1].text == "您好，我是店长，马上为您安排。"  # delivered on the platform
    with store.read() as conn:
        actions = conn.execute("SELECT operator, action FROM operator_action ORDER BY id").all()
    assert [tuple(a) for a in actions] == [("alice", "take-over"), ("alice", "send")]


def unknown_send(store, platform, transport, buyer_name: str) -> int:
    """A buyer's customer with a console send `op-1` ("在的") whose outcome is unknown."""
    said = platform.buyer_says("shop", "b1", buyer_name, "在吗")
    [customer] = ingest_page(store, transport.page_of("shop", [said])).customer_ids
    send_manual(store, ManualSend(request_id="op-1", customer_id=customer, text="在的"))
    grant = begin_attempt(store, "op-1", "w", 60)
    record_failure(store, "op-1", grant.attempt_no, SendFailure("unknown", "TIMEOUT"))
    return customer


def test_an_operator_settles_a_send_whose_outcome_is_unknown(
    console, browser, settings, store, shop, platform, transport
):
    customer = unknown_send(store, platform, transport, "李四")
    sign_in(browser, console, "alice")
    browser.get(f"{console}/c/{customer}")
    assert ("console-operator", "在的", "result-unknown") in lines(browser)
    assert "1 sends of unknown outcome" in browser.find_element(By.ID, "notices").text
    browser.find_element(By.CSS_SELECTOR, "#settle .confirm-delivered").click()
    WebDriverWait(browser, 10).until(lambda d: ("console-operator", "在的", "sent") in lines(d))
    assert not browser.find_elements(By.ID, "notices")  # nothing needs a human now
    assert platform.received("shop") == []  # settled by the operator's word: never sent again


def test_an_operator_sends_a_message_of_unknown_outcome_again_under_a_new_id(
    console, browser, store, shop, platform, transport
):
    customer = unknown_send(store, platform, transport, "赵六")
    sign_in(browser, console, "alice")
    browser.get(f"{console}/c/{customer}")
    browser.find_element(By.CSS_SELECTOR, "#settle .retry").click()
    WebDriverWait(browser, 10).until(lambda d: ("console-operator", "在的", "sent") in lines(d))
    assert ("console-operator", "在的", "result-unknown") in lines(browser)  # the first stays for the operator
    [sent] = platform.received("shop")
    assert sent.text == "在的" and sent.client_ref != "op-1"


def test_a_viewer_is_refused_actions_and_no_action_passes_without_its_csrf_token(
    console, browser, store, shop, platform, transport
):
    said = platform.buyer_says("shop", "b1", "王五", "你好")
    [customer] = ingest_page(store, transport.page_of("shop", [said])).customer_ids
    sign_in(browser, console, "victor")
    browser.get(f"{console}/c/{customer}")
    assert not browser.find_elements(By.ID, "take-over")  # a viewer is offered no action
    with httpx.Client(base_url=console, follow_redirects=True) as client:
        token = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text)[1]  # type: ignore[index]
        wrong = client.post("/login", data={"csrf": token, "name": "victor", "password": "not-it"})
        assert "login-error" in wrong.text and 'value="victor"' in wrong.text  # the name stays typed
        token = http_sign_in(client, "victor")
        refused = client.post(f"/c/{customer}/take-over", data={"csrf": token, "reason": "x"}, follow_redirects=False)
        assert refused.status_code == 403 and "KEFU_ROLE_REQUIRED" in refused.text
        client.cookies.clear()
        token = http_sign_in(client, "alice")
        empty = client.post(f"/c/{customer}/send", data={"csrf": token, "request_id": "console-1", "text": " "})
        assert empty.status_code == 400 and "KEFU_INVALID_INPUT" in empty.text  # and nothing registered:
        assert "Value error" not in empty.text and "give either text or a file" in empty.text
        assert 'id="who"' in empty.text and f'href="/c/{customer}" id="back"' in empty.text  # a way on
        assert client.get("/?before=not-a-cursor").status_code == 400
        forged = client.post(f"/c/{customer}/take-over", data={"reason": "x"})  # no token: another site's form
        assert forged.status_code == 403 and "KEFU_CSRF_INVALID" in forged.text
        taken = client.post(f"/c/{customer}/take-over", data={"csrf": token, "reason": "x"}, follow_redirects=False)
        assert taken.status_code == 303
        waiting = client.get("/ops").text.split('id="handoffs"')[1].split("</ul>")[0]
        assert "王五" not in waiting  # alice has it: nobody waits for a human
        assert client.get("/readyz").text == "ready"
        scraped = client.get("/metrics")
    families = {f.name: f for f in text_string_to_metric_families(scraped.text)}
    assert families["kefu_handoffs_waiting"].samples[0].value == 0
    depths = {sample.labels["queue"]: sample.value for sample in families["kefu_queue_depth"].samples}
    assert set(depths) == {queue_name(family, "default") for family in FAMILIES}  # asked of Redis
    with store.read() as conn:
        assert conn.execute("SELECT handling_paused FROM customer").scalar_one() == 1
        assert conn.execute("SELECT count(*) FROM outbox_request").scalar_one() == 0


def test_an_operator_sends_a_file_then_its_text(console, browser, tmp_path, settings, store, shop, platform, transport):
    said = platform.buyer_says("shop", "b1", "孙七", "有尺码表吗")
    [customer] = ingest_page(store, transport.page_of("shop", [said])).customer_ids
    chart = tmp_path / "chart.png"
    chart.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    sign_in(browser, console, "alice")
    browser.get(f"{console}/c/{customer}")
    browser.find_element(By.ID, "file").send_keys(str(chart))
    browser.find_element(By.ID, "text").send_keys("这是尺码表")
    browser.find_element(By.ID, "send").click()
    WebDriverWait(browser, 10).until(lambda d: ("console-operator", "这是尺码表", "sent") in lines(d))
    assert ("console-operator", "[image chart.png]", "sent") in lines(browser)
    assert [(r.kind, r.text) for r in platform.received("shop")] == [("image", "chart.png"), ("text", "这是尺码表")]
    with httpx.Client(base_url=console, follow_redirects=True) as client:
        token = http_sign_in(client, "alice")
        empty = {"file": ("empty.png", b"", "image/png")}
        refused = client.post(f"/c/{customer}/send", data={"csrf": token, "request_id": "console-2"}, files=empty)
        assert refused.status_code == 400 and "KEFU_MEDIA_INVALID" in refused.text and "is empty" in refused.text
        huge = {"file": ("huge.png", b"\0" * (settings.media_max_bytes + 70_000), "image/png")}
        refused = client.post(f"/c/{customer}/send", data={"csrf": token, "request_id": "console-3"}, files=huge)
        assert refused.status_code == 413 and "KEFU_REQUEST_TOO_LARGE" in refused.text
        client.cookies.clear()  # nobody signed in: refused before the form is read
        anonymous = client.post(f"/c/{customer}/send", files=huge, follow_redirects=False)
    assert anonymous.status_code == 303 and anonymous.headers["location"] == "/login"
    assert len(platform.received("shop")) == 2  # the refused files registered nothing


def held(store) -> int:
    with store.read() as conn:
        return conn.execute("SELECT count(*) FROM held_page").scalar_one()


def test_an_admin_pauses_input_and_nothing_is_lost(worker, console, browser, store, platform, transport):
    sign_in(browser, console, "ada")
    browser.get(f"{console}/ops")
    assert browser.find_element(By.ID, "input-state").text == "taking in pages"
    assert "shop" in browser.find_element(By.ID, "checkpoints").text
    browser.find_element(By.ID, "input-pause").click()
    after_submit(browser).until(lambda d: "paused for the whole host" in text_of(d, "input-state"))

    said = platform.buyer_says("shop", "b1", "周八", "什么时候发货？")
    worker.send_task("kefu.ingest.page", args=[transport.page_of("shop", [said]).model_dump(mode="json")])
    wait_for(lambda: held(store) == 1, 30, "the page held, not ingested")
    assert platform.received("shop") == []

    with httpx.Client(base_url=console, follow_redirects=True) as client:  # an operator is not an admin
        token = http_sign_in(client, "alice")
        refused = client.post("/ops/input/resume", data={"csrf": token}, follow_redirects=False)
    assert refused.status_code == 403 and "KEFU_ROLE_REQUIRED" in refused.text

    browser.find_element(By.CSS_SELECTOR, ".input-resume").click()
    after_submit(browser).until(lambda d: text_of(d, "input-state") == "taking in pages")
    wait_for(lambda: len(platform.received("shop")) == 1, 30, "the held message answered once resumed")
    assert held(store) == 0
    with store.read() as conn:
        actions = conn.execute("SELECT operator, action, detail FROM operator_action ORDER BY id").all()
    assert [tuple(a) for a in actions] == [("ada", "pause-input", "host"), ("ada", "resume-input", "host")]


def test_a_new_password_ends_open_sessions_and_guessing_is_throttled(console, store, shop):
    with httpx.Client(base_url=console, follow_redirects=True) as client:
        http_sign_in(client, "alice")
        assert client.get("/").url.path == "/"
        add_operator(store, "alice", Role.OPERATOR, "a-new-password-2")  # e.g. the old one leaked
        assert client.get("/").url.path == "/login"  # that session has ended
    with httpx.Client(base_url=console) as client:
        token = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text)[1]  # type: ignore[index]
        for _ in range(5):
            wrong = client.post("/login", data={"csrf": token, "name": "victor", "password": "guess-guess"})
            assert wrong.status_code == 200 and "wrong password" in wrong.text
        right = client.post("/login", data={"csrf": token, "name": "victor", "password": PASSWORD})
        assert right.status_code == 429 and "KEFU_SIGN_IN_THROTTLED" in right.text  # even the right password, for now
        other = client.post("/login", data={"csrf": token, "name": "ada", "password": PASSWORD})
    assert other.status_code == 303  # another operator is not held up by guesses at victor


def test_an_operator_sees_an_image_the_buyer_sent_while_a_human_handles(
    worker, console, browser, store, platform, transport
):
    said = platform.buyer_says("shop", "b1", "张三", "在吗")
    [customer] = ingest_page(store, transport.page_of("shop", [said])).customer_ids
    pause_handling(store, customer, "VIP")  # no turn runs: the image is fetched on its own
    photo = BuyerMedia(kind="image", name="photo.png", data=TINY_PNG)
    sent = platform.buyer_says("shop", "b1", "张三", "", media=photo)
    worker.send_task("kefu.ingest.page", args=[transport.page_of("shop", [sent]).model_dump(mode="json")])
    sign_in(browser, console, "alice")
    browser.get(f"{console}/c/{customer}")
    shown = "const i = document.querySelector('#lines li.buyer img'); return !!i && i.complete && i.naturalWidth"
    WebDriverWait(browser, 30).until(lambda d: d.execute_script(shown) == 1)
    assert any(speaker == "buyer" and text.startswith("[image image/png") for speaker, text, _ in lines(browser))
    assert platform.received("shop") == []  # a human handles the conversation: nothing was sent
    image = browser.execute_script("return document.querySelector('#lines li.buyer img').getAttribute('src')")
    with httpx.Client(base_url=console, follow_redirects=True) as client:
        http_sign_in(client, "alice")
        assert client.get(image).content == TINY_PNG
        elsewhere = client.get(image.replace(f"/c/{customer}/", f"/c/{customer + 1}/"))
        assert elsewhere.status_code == 404  # an image is served only within its own conversation
