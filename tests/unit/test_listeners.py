"""The listener shell (SPEC 3.11) against a scripted flaky transport: real threads, real sleeps
(short delays), a real delivery store. The state sequence, the delays asked for and waited,
the budget, heartbeats, and stopping are observed from outside."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

import pytest

from config import ListenerSettings
from runtime.accounts.registry import AccountSpec, create_account, load_account, set_connection_intent
from runtime.admission.routes import RouteChanges, update_route
from runtime.errors import KefuError
from runtime.inbound.ingest import ingest_page
from runtime.inbound.pages import InboundPage
from runtime.ports import BuyerReadReceipt, Heartbeat, ListenerFailure, Received
from worker.listeners import AccountListener, ListenerChange, ListenerSupervisor

FAST = ListenerSettings(
    reconnect_initial_ms=20,
    reconnect_max_ms=50,
    reconnect_max_attempts=3,
    reconnect_stable_ms=3_600_000,
    heartbeat_timeout_ms=1000,
    supervise_interval_ms=50,
)

Step = Received | Heartbeat | ListenerFailure


class ScriptedConnection:
    def __init__(self, steps: list[Step]) -> None:
        self.steps: queue.Queue[Step] = queue.Queue()
        for step in steps:
            self.steps.put(step)
        self.closed = threading.Event()

    def receive(self, timeout_s: float) -> Received | Heartbeat | None:
        if self.closed.is_set():
            raise ListenerFailure("FAKE_CLOSED")
        try:
            step = self.steps.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if isinstance(step, ListenerFailure | KefuError):
            raise step
        return step

    def close(self) -> None:
        self.closed.set()


class FlakyTransport:
    """Each connect takes the next entry of the plan: a failure to raise, or the steps of a
    connection. When the plan runs out, connecting is refused."""

    platform = "simulator"
    stream_id = "simulator"

    def __init__(self, plan: list[ListenerFailure | list[Step]]) -> None:
        self.plan = list(plan)
        self.connects: list[float] = []
        self.connections: list[ScriptedConnection] = []

    def connect(self, account_id: str, cursor: str | None) -> ScriptedConnection:
        self.connects.append(time.monotonic())
        step = self.plan.pop(0) if self.plan else ListenerFailure("FAKE_REFUSED")
        if isinstance(step, ListenerFailure | KefuError):
            raise step
        connection = ScriptedConnection(step)
        self.connections.append(connection)
        return connection


class Observer:
    def __init__(self) -> None:
        self.changes: list[tuple[float, ListenerChange]] = []
        self.condition = threading.Condition()

    def __call__(self, change: ListenerChange) -> None:
        with self.condition:
            self.changes.append((time.monotonic(), change))
            self.condition.notify_all()

    def wait_for(self, state: str, count: int = 1, timeout_s: float = 10) -> None:
        with self.condition:
            ok = self.condition.wait_for(lambda: sum(c.state == state for _, c in self.changes) >= count, timeout_s)
        assert ok, f"no {count}× {state!r} in {self.sequence()}"

    def sequence(self) -> list[tuple[str, str | None, int | None]]:
        return [(c.state, c.code, c.delay_ms) for _, c in self.changes]


class Published:
    def __init__(self, fail: bool = False) -> None:
        self.items: list[InboundPage | BuyerReadReceipt] = []
        self.fail = fail

    def __call__(self, item: InboundPage | BuyerReadReceipt) -> None:
        if self.fail:
            raise ConnectionError("broker down")
        self.items.append(item)


class Acks:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


@pytest.fixture
def running() -> Iterator[list[AccountListener]]:
    listeners: list[AccountListener] = []
    yield listeners
    for listener in listeners:
        listener.stop()


def start(store, shop, transport, publish, observer, running, settings=FAST) -> AccountListener:
    with store.read() as conn:
        account = load_account(conn, shop)
    listener = AccountListener(account, transport, store, publish, settings, observer)
    running.append(listener)
    listener.start()
    return listener


def stored_state(store, shop) -> tuple[str, str | None]:
    with store.read() as conn:
        account = load_account(conn, shop)
    return account.listener_state, account.last_error


def a_page(transport_sim, platform, shop, text: str) -> InboundPage:
    return transport_sim.page_of(shop, [platform.buyer_says(shop, "b1", "张三", text)])


def test_a_flaky_connection_follows_the_backoff_and_ends_failed_when_connecting_keeps_failing(
    store, shop, transport, platform, running
):
    acks = Acks()
    page = a_page(transport, platform, shop, "在吗")
    flaky = FlakyTransport(
        [
            ListenerFailure("FAKE_REFUSED"),
            ListenerFailure("FAKE_REFUSED"),
            [Heartbeat(), Received(page, ack=acks), Heartbeat(), ListenerFailure("FAKE_DROPPED")],
        ]
    )
    observer, published = Observer(), Published()
    start(store, shop, flaky, published, observer, running)
    observer.wait_for("failed")

    assert observer.sequence() == [
        ("starting", None, None),
        ("reconnecting", "FAKE_REFUSED", 20),
        ("starting", None, None),
        ("reconnecting", "FAKE_REFUSED", 40),
        ("starting", None, None),
        ("running", None, None),  # connected, but a short run without a commit restores nothing
        ("reconnecting", "FAKE_DROPPED", 50),  # 20·2² capped at reconnect_max_ms; the third failure
        ("starting", None, None),
        ("failed", "KEFU_LISTENER_RETRIES_EXHAUSTED", None),
    ]
    # Each retry waited at least the delay it announced.
    waits = [b - a for a, b in zip(flaky.connects, flaky.connects[1:], strict=False)]
    assert [w >= d / 1000 for w, d in zip(waits, [20, 40, 50], strict=False)] == [True, True, True]
    assert published.items == [page] and acks.count == 1  # published, then acknowledged, once
    assert flaky.connections[0].closed.is_set()
    assert stored_state(store, shop) == ("failed", "KEFU_LISTENER_RETRIES_EXHAUSTED")


def test_a_page_committed_while_running_restores_the_initial_delay(store, shop, transport, platform, running):
    page = a_page(transport, platform, shop, "在吗")
    flaky = FlakyTransport(
        [
            ListenerFailure("FAKE_REFUSED"),
            ListenerFailure("FAKE_REFUSED"),
            [Received(page), Heartbeat(), Heartbeat(), Heartbeat(), ListenerFailure("FAKE_DROPPED")],
        ]
    )
    observer = Observer()

    def publish_and_commit(item: InboundPage | BuyerReadReceipt) -> None:
        ingest_page(store, item)  # stands in for the broker and the ingest task

    start(store, shop, flaky, publish_and_commit, observer, running)
    observer.wait_for("failed")
    reconnects = [(code, delay) for state, code, delay in observer.sequence() if state == "reconnecting"]
    # After the committed page the delay starts again at the initial one (then 40, 50 and out:
    # three failures to connect in a row).
    assert reconnects == [
        ("FAKE_REFUSED", 20),
        ("FAKE_REFUSED", 40),
        ("FAKE_DROPPED", 20),
        ("FAKE_REFUSED", 40),
        ("FAKE_REFUSED", 50),
    ]


def test_twenty_drops_each_after_a_committed_page_leave_the_listener_running(store, shop, transport, platform, running):
    pages = [a_page(transport, platform, shop, f"还在吗 {n}") for n in range(21)]
    drops: list[ListenerFailure | list[Step]] = [[Received(p), ListenerFailure("FAKE_DROPPED")] for p in pages[:20]]
    flaky = FlakyTransport([*drops, [Received(pages[20]), *[Heartbeat()] * 1000]])
    observer, committed = Observer(), []

    def publish_and_commit(item: InboundPage | BuyerReadReceipt) -> None:
        ingest_page(store, item)  # stands in for the broker and the ingest task
        committed.append(item)

    start(store, shop, flaky, publish_and_commit, observer, running)
    observer.wait_for("running", count=21)
    sequence = observer.sequence()
    assert all(state != "failed" for state, _, _ in sequence)
    assert [delay for state, _, delay in sequence if state == "reconnecting"] == [20] * 20  # budget and delay whole
    deadline = time.monotonic() + 5
    while len(committed) < 21 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert committed == pages and stored_state(store, shop) == ("running", None)


def test_a_connection_that_keeps_opening_and_dropping_fails_and_raises_the_alert(store, shop, running):
    """Issue 42 item 5: every connection opens and drops at once, nothing commits; the listener
    used to reconnect forever (the budget was restored on each connect) and never alerted."""
    from runtime.operators.alerts import AlertKind, undelivered
    from runtime.operators.status import notices

    flapping = FlakyTransport([[Heartbeat(), ListenerFailure("FAKE_DROPPED")] for _ in range(20)])
    observer = Observer()
    start(store, shop, flapping, Published(), observer, running)
    observer.wait_for("failed")
    assert observer.sequence() == [
        ("starting", None, None),
        ("running", None, None),
        ("reconnecting", "FAKE_DROPPED", 20),
        ("starting", None, None),
        ("running", None, None),
        ("reconnecting", "FAKE_DROPPED", 40),
        ("starting", None, None),
        ("running", None, None),
        ("reconnecting", "FAKE_DROPPED", 50),
        ("starting", None, None),
        ("running", None, None),
        ("failed", "KEFU_LISTENER_RETRIES_EXHAUSTED", None),
    ]
    assert len(flapping.connects) == 4  # the first connection and three reconnects, then no more
    assert stored_state(store, shop) == ("failed", "KEFU_LISTENER_RETRIES_EXHAUSTED")
    alerts = [(a.kind, a.account_id, a.code) for a in undelivered(store)]
    assert alerts == [(AlertKind.LISTENER_FAILED, shop, "KEFU_LISTENER_RETRIES_EXHAUSTED")]
    assert notices(store).listeners_failed == [shop]


def test_an_authorization_failure_is_final_at_once(store, shop, running):
    flaky = FlakyTransport([ListenerFailure("FAKE_TOKEN_REVOKED", authorization=True)])
    observer = Observer()
    start(store, shop, flaky, Published(), observer, running)
    observer.wait_for("failed")
    assert observer.sequence() == [("starting", None, None), ("failed", "FAKE_TOKEN_REVOKED", None)]
    time.sleep(0.1)
    assert len(flaky.connects) == 1
    assert stored_state(store, shop) == ("failed", "FAKE_TOKEN_REVOKED")
    with store.read() as conn:
        assert load_account(conn, shop).authorization == "failed"  # no more listening or sending
    set_connection_intent(store, shop, "connected")  # `kefu accounts resume`: try the credentials again
    with store.read() as conn:
        assert load_account(conn, shop).authorization == "ready"


def test_missing_credentials_are_final_without_blaming_the_platform(store, shop, running):
    flaky = FlakyTransport([KefuError("KEFU_CREDENTIALS_MISSING", "no credentials are stored")])
    observer = Observer()
    start(store, shop, flaky, Published(), observer, running)
    observer.wait_for("failed")
    assert observer.sequence() == [("starting", None, None), ("failed", "KEFU_CREDENTIALS_MISSING", None)]
    with store.read() as conn:
        assert load_account(conn, shop).authorization == "ready"


def test_a_silent_connection_is_dead_after_the_heartbeat_window(store, shop, running):
    flaky = FlakyTransport([[], [Heartbeat()]])  # the first never says anything again
    observer = Observer()
    start(store, shop, flaky, Published(), observer, running)
    observer.wait_for("running", count=2)
    assert observer.sequence()[:4] == [
        ("starting", None, None),
        ("running", None, None),
        ("reconnecting", "KEFU_LISTENER_HEARTBEAT_LOST", 20),
        ("starting", None, None),
    ]
    assert flaky.connections[0].closed.is_set() and not flaky.connections[1].closed.is_set()
    assert flaky.connects[1] - flaky.connects[0] >= FAST.heartbeat_timeout_ms / 1000


def test_a_publish_failure_is_not_acknowledged_and_reconnects(store, shop, transport, platform, running):
    acks = Acks()
    flaky = FlakyTransport([[Received(a_page(transport, platform, shop, "在吗"), ack=acks)], [Heartbeat()]])
    observer = Observer()
    start(store, shop, flaky, Published(fail=True), observer, running)
    observer.wait_for("running", count=2)
    assert ("reconnecting", "KEFU_LISTENER_PUBLISH_FAILED", 20) in observer.sequence()
    assert acks.count == 0  # the platform redelivers it


def test_stopping_cancels_a_pending_retry(store, shop, running):
    slow = ListenerSettings(reconnect_initial_ms=60_000, reconnect_max_ms=60_000)
    flaky = FlakyTransport([ListenerFailure("FAKE_REFUSED")])
    observer = Observer()
    listener = start(store, shop, flaky, Published(), observer, running, settings=slow)
    observer.wait_for("reconnecting")
    listener.stop(timeout_s=5)
    assert observer.sequence()[-1] == ("stopped", None, None)  # not after the 60 s delay
    assert len(flaky.connects) == 1 and stored_state(store, shop) == ("stopped", None)


def test_a_stopped_listener_closes_its_connection_and_publishes_nothing_more(store, shop, transport, platform, running):
    first = a_page(transport, platform, shop, "一")
    flaky = FlakyTransport([[Received(first)]])
    observer, published = Observer(), Published()
    listener = start(store, shop, flaky, published, observer, running)
    deadline = time.monotonic() + 5
    while not published.items and time.monotonic() < deadline:
        time.sleep(0.01)
    listener.stop()
    connection = flaky.connections[0]
    assert connection.closed.is_set()
    connection.steps.put(Received(a_page(transport, platform, shop, "二")))  # a leftover delivery
    time.sleep(0.3)
    assert published.items == [first]
    assert observer.sequence()[-1] == ("stopped", None, None)


@pytest.fixture
def supervisors(store) -> Iterator[list[ListenerSupervisor]]:
    started: list[ListenerSupervisor] = []
    yield started
    for supervisor in started:
        supervisor.stop()


def test_the_supervisor_runs_one_listener_per_live_account_and_follows_disconnects(store, shop, supervisors):
    transports = {"A": FlakyTransport([[Heartbeat()] * 1000]), "B": FlakyTransport([[Heartbeat()] * 1000])}
    for transport in transports.values():
        supervisor = ListenerSupervisor(store, lambda _, t=transport: t, Published(), FAST)
        supervisors.append(supervisor)
        supervisor.start()
    create_account(store, AccountSpec(id="no-routes", platform="simulator", identity="seller-2"))
    deadline = time.monotonic() + 5
    while stored_state(store, shop)[0] != "running" and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)  # several supervision passes
    connections = [c for t in transports.values() for c in t.connections]
    assert len(connections) == 1  # the account's lease: one listener across both supervisors
    assert stored_state(store, "no-routes") == ("stopped", None)  # nothing to deliver to: no listener

    def wait_state(state: str) -> None:
        deadline = time.monotonic() + 5
        while stored_state(store, shop)[0] != state and time.monotonic() < deadline:
            time.sleep(0.02)

    set_connection_intent(store, shop, "disconnected")
    wait_state("stopped")
    assert stored_state(store, shop) == ("stopped", None) and connections[0].closed.is_set()

    for transport in transports.values():
        transport.plan.append([Heartbeat()] * 1000)
    set_connection_intent(store, shop, "connected")
    wait_state("running")
    update_route(store, "all-direct", 1, RouteChanges(enabled=False), op_id="op-off")  # nowhere to deliver
    wait_state("stopped")
    connections = [c for t in transports.values() for c in t.connections]
    assert len(connections) == 2 and all(c.closed.is_set() for c in connections)


def test_an_account_without_a_transport_is_failed_with_a_clear_code(store, supervisors):
    from runtime.admission.routes import RouteSpec, create_route
    from runtime.errors import KefuError

    create_account(store, AccountSpec(id="ding", platform="dingtalk", identity="robot-1"))
    create_route(store, RouteSpec(id="ding-direct", account_id="ding", conversation_type="direct"), op_id="op-d")

    def no_transport(platform: str):
        raise KefuError("KEFU_TRANSPORT_UNAVAILABLE", f"no {platform} transport")

    supervisor = ListenerSupervisor(store, no_transport, Published(), FAST)
    supervisors.append(supervisor)
    supervisor.supervise()
    assert stored_state(store, "ding") == ("failed", "KEFU_TRANSPORT_UNAVAILABLE")


def test_an_acknowledgement_that_fails_after_publishing_does_not_stop_the_listener(
    store, shop, transport, platform, running
):
    def lost_session() -> None:
        raise RuntimeError("Event loop is closed")

    first, second = a_page(transport, platform, shop, "一"), a_page(transport, platform, shop, "二")
    flaky = FlakyTransport([[Received(first, ack=lost_session), Received(second)]])
    observer, published = Observer(), Published()
    start(store, shop, flaky, published, observer, running)
    deadline = time.monotonic() + 5
    while len(published.items) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert published.items == [first, second] and observer.sequence() == [
        ("starting", None, None),
        ("running", None, None),
    ]
