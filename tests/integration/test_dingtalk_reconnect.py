"""A DingTalk listener in a real worker (`--listen`, Redis) through routine disconnects, cut
sockets, a hanging gateway and refused credentials, against the local fake DingTalk's real
HTTP and WebSocket servers. The account's row in the delivery store, the worker's log and the
fake's record of sends are what is checked."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from config import Settings
from runtime.accounts.registry import load_account
from runtime.store import DeliveryStore
from tests.fakes.dingtalk import FakeDingTalk
from tests.integration.helpers import wait_for, worker_env
from worker.celery_app import make_app
from worker.process import WorkerProcess

pytestmark = pytest.mark.parametrize("broker_url", ["redis"], indirect=True)

ACCOUNT = "ding"
ROUTINE = 20


@pytest.fixture
def start_worker(settings: Settings, fake_dingtalk: FakeDingTalk, ding: str) -> Iterator[Callable[..., WorkerProcess]]:
    """Start a listening worker with short reconnect delays and a 1 s DingTalk timeout."""
    started: list[WorkerProcess] = []

    def start(**extra: str) -> WorkerProcess:
        env = worker_env(
            settings,
            KEFU_LISTENER__RECONNECT_INITIAL_MS="50",
            KEFU_LISTENER__RECONNECT_MAX_MS="200",
            KEFU_DINGTALK__OPENAPI_URL=fake_dingtalk.url,
            KEFU_DINGTALK__OAPI_URL=fake_dingtalk.url,
            KEFU_DINGTALK__TIMEOUT_S="1",
            **extra,
        )
        process = WorkerProcess(env, settings.data_dir / "worker.log", listen=True).start()
        started.append(process)
        process.wait_ready(make_app(settings))
        return process

    yield start
    for process in started:
        process.stop()


def account_facts(store: DeliveryStore) -> tuple[str, str | None, str]:
    with store.read() as conn:
        account = load_account(conn, ACCOUNT)
    return account.listener_state, account.last_error, account.authorization


def worker_log(settings: Settings) -> str:
    return (settings.data_dir / "worker.log").read_text()


def wait_connection(fake: FakeDingTalk, n: int, settings: Settings) -> None:
    wait_for(
        lambda: fake.connections >= n and fake.connected, 10, f"connection {n}", lambda: worker_log(settings)[-3000:]
    )


def answered_once(fake: FakeDingTalk, store: DeliveryStore, buyer: str) -> None:
    fake.buyer_says(buyer, "什么时候发货")
    wait_for(lambda: any(buyer in send.user_ids for send in fake.sends), 20, f"a reply to {buyer}")
    wait_for(lambda: fake.unacked == 0, 5, "the message to be ACKed")
    assert [send for send in fake.sends if buyer in send.user_ids] == [fake.sends[-1]]


def test_a_listener_survives_twenty_routine_disconnects_in_a_row_and_stays_running(
    settings, store, fake_dingtalk, start_worker
):
    start_worker()
    wait_connection(fake_dingtalk, 1, settings)
    wait_for(lambda: account_facts(store)[0] == "running", 10, "the listener to run")
    for n in range(1, ROUTINE + 1):
        fake_dingtalk.ask_disconnect()
        wait_connection(fake_dingtalk, n + 1, settings)
        assert account_facts(store) == ("running", None, "ready")  # a handover, never a reconnect
    answered_once(fake_dingtalk, store, "staff-after-disconnects")
    assert fake_dingtalk.tickets_issued == ROUTINE + 1
    assert account_facts(store) == ("running", None, "ready")
    assert "reconnecting" not in worker_log(settings)


def test_twenty_cut_sockets_in_a_row_each_after_a_stable_run_leave_the_listener_running(
    settings, store, fake_dingtalk, start_worker
):
    stable_s = 0.2
    start_worker(KEFU_LISTENER__RECONNECT_STABLE_MS=str(int(stable_s * 1000)))
    wait_connection(fake_dingtalk, 1, settings)
    for n in range(1, ROUTINE + 1):
        wait_for(lambda: account_facts(store)[0] == "running", 10, "the listener to run", lambda: account_facts(store))
        opened = time.monotonic()  # the run began no later than this
        wait_for(lambda opened=opened: time.monotonic() - opened > 2 * stable_s, 5, f"run {n} to be stable")
        fake_dingtalk.drop()
        wait_connection(fake_dingtalk, n + 1, settings)
    wait_for(lambda: account_facts(store)[0] == "running", 10, "the listener to run", lambda: account_facts(store))
    answered_once(fake_dingtalk, store, "staff-after-cuts")
    assert account_facts(store) == ("running", None, "ready")
    assert worker_log(settings).count("reconnecting (DINGTALK_CONNECTION_LOST") == ROUTINE


def test_a_hanging_connections_open_times_out_into_reconnecting_instead_of_starting_forever(
    settings, store, fake_dingtalk, start_worker
):
    fake_dingtalk.open_stalls, fake_dingtalk.open_stall_s = 2, 5.0  # the worker gives up after 1 s
    start_worker()
    wait_connection(fake_dingtalk, 1, settings)
    wait_for(lambda: account_facts(store)[0] == "running", 10, "the listener to run", lambda: account_facts(store))
    assert worker_log(settings).count("listener ding: reconnecting (DINGTALK_OPEN_TIMEOUT)") == 2
    answered_once(fake_dingtalk, store, "staff-after-hang")


def test_refused_credentials_at_connections_open_fail_the_listener_and_the_authorization(
    settings, store, fake_dingtalk, start_worker
):
    fake_dingtalk.open_answers = [(401, {"code": "authFailed", "message": "鉴权失败"})]
    start_worker()
    wait_for(lambda: account_facts(store)[0] == "failed", 15, "the listener to fail", lambda: account_facts(store))
    assert account_facts(store) == ("failed", "DINGTALK_AUTH_FAILED", "failed")
    assert fake_dingtalk.tickets_issued == 0 and fake_dingtalk.connections == 0
    assert fake_dingtalk.client_secret not in worker_log(settings)


def test_a_connection_accepted_then_dropped_over_and_over_fails_the_listener_and_alerts_the_operator(
    settings, store, fake_dingtalk, start_worker, kefu
):
    """Issue 42 item 5: the fake accepts every connection and cuts it at once; nothing commits.
    The budget used to be restored on every connect, so this flapped forever, unseen."""
    from runtime.operators.alerts import AlertKind, undelivered
    from worker.cli import cli

    fake_dingtalk.drop_every_connection = True
    try:
        start_worker(KEFU_LISTENER__RECONNECT_STABLE_MS="5000", KEFU_LISTENER__RECONNECT_MAX_ATTEMPTS="3")
        wait_for(
            lambda: account_facts(store)[0] == "failed",
            30,
            "the flapping listener to fail",
            lambda: (account_facts(store), fake_dingtalk.connections, worker_log(settings)[-3000:]),
        )
    finally:
        fake_dingtalk.drop_every_connection = False
    assert account_facts(store) == ("failed", "KEFU_LISTENER_RETRIES_EXHAUSTED", "ready")
    assert fake_dingtalk.connections == 4  # the first connection and three reconnects
    assert worker_log(settings).count("listener ding: running") == 4
    alerts = [(a.kind, a.account_id, a.code) for a in undelivered(store)]
    assert alerts == [(AlertKind.LISTENER_FAILED, ACCOUNT, "KEFU_LISTENER_RETRIES_EXHAUSTED")]
    status = kefu.invoke(cli, ["status"], env={"COLUMNS": "250", "KEFU_LANGUAGE": "en"})
    assert status.exit_code == 0, status.output
    assert "failed (KEFU_LISTENER_RETRIES_EXHAUSTED)" in status.output
