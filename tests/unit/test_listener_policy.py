"""The listener's reconnect policy (SPEC 3.11) against a scripted flaky connection."""

from __future__ import annotations

from config import ListenerSettings
from runtime.accounts.listener_policy import ListenerPolicy, record_listener_state

SECOND = 1000


def account_facts(store, account_id: str) -> tuple[str, str | None, str]:
    with store.read() as conn:
        row = conn.execute(
            "SELECT listener_state, last_error, authorization FROM account WHERE id = :a", {"a": account_id}
        ).one()
    return row[0], row[1], row[2]


def flaky(policy: ListenerPolicy, script: list[tuple[str, int]]) -> list[tuple[str, int | None]]:
    """Play (event, at ms) and record (state after, delay) for each."""
    trace = []
    for event, at in script:
        delay = None
        if event == "start":
            policy.start()
        elif event == "up":
            policy.connected(at)
        elif event == "page":
            policy.page_committed()
        elif event == "down":
            delay = policy.failed(at, "KEFU_LISTENER_CONNECTION_LOST")
        elif event == "auth":
            delay = policy.failed(at, "DINGTALK_AUTH_FAILED", authorization=True)
        elif event == "stop":
            policy.stop()
        trace.append((policy.state, delay))
    return trace


def test_failures_to_connect_spend_the_budget_and_a_short_run_restores_neither_it_nor_the_delay():
    policy = ListenerPolicy(ListenerSettings())
    trace = flaky(
        policy,
        [
            ("start", 0),
            ("down", 0),
            ("down", 1 * SECOND),
            ("up", 3 * SECOND),  # connected, but not for long: nothing is restored
            ("down", 10 * SECOND),
            ("down", 15 * SECOND),
        ],
    )
    assert trace == [
        ("starting", None),
        ("reconnecting", 1000),
        ("reconnecting", 2000),
        ("running", None),
        ("reconnecting", 4000),  # the third failure since the listener last proved healthy
        ("failed", None),  # the fourth: the budget of three reconnects is spent
    ]
    assert policy.last_error == "KEFU_LISTENER_RETRIES_EXHAUSTED"


def test_a_flapping_connection_that_opens_and_drops_every_few_seconds_ends_failed():
    """Issue 42 item 5: each connection opens, then drops 2 s later (far short of the stable
    run), and no page commits. Today's policy restored the budget on every connect, so this
    flapped forever without an alert."""
    settings = ListenerSettings(reconnect_initial_ms=100, reconnect_max_ms=1600, reconnect_max_attempts=3)
    policy = ListenerPolicy(settings)
    flaky(policy, [("start", 0), ("up", 0)])
    trace: list[tuple[str, int | None]] = []
    for n in range(1, 21):  # as the worker's shell does: no new connection once failed
        trace += flaky(policy, [("down", n * 2 * SECOND)])
        if policy.state == "failed":
            break
        trace += flaky(policy, [("start", n * 2 * SECOND), ("up", n * 2 * SECOND + 100)])
    assert [state for state, _ in trace] == ["reconnecting", "starting", "running"] * 3 + ["failed"]
    assert [delay for _, delay in trace if delay is not None] == [100, 200, 400]
    assert policy.state == "failed" and policy.last_error == "KEFU_LISTENER_RETRIES_EXHAUSTED"
    assert not policy.authorization_failed  # a flapping network is no reason to distrust the credentials


def test_drops_after_stable_runs_or_committed_pages_never_fail_and_the_delay_stays_initial():
    settings = ListenerSettings(reconnect_initial_ms=100, reconnect_max_ms=1600, reconnect_stable_ms=5 * SECOND)
    policy = ListenerPolicy(settings)
    flaky(policy, [("start", 0), ("up", 0)])
    stable = [(e, n * 6 * SECOND) for n in range(1, 11) for e in ("down", "start", "up")]  # each run 6 s
    trace = flaky(policy, stable)
    assert "failed" not in {state for state, _ in trace}
    assert [delay for _, delay in trace if delay is not None] == [100] * 10
    base = 61 * SECOND  # now short runs, each with a page committed while running
    committed = [(e, base + n * 500) for n in range(1, 11) for e in ("page", "down", "start", "up")]
    trace = flaky(policy, committed)
    assert "failed" not in {state for state, _ in trace}
    assert [delay for _, delay in trace if delay is not None] == [100] * 10


def test_the_budget_counts_failures_since_the_last_healthy_run_not_since_the_last_connection():
    policy = ListenerPolicy(ListenerSettings(reconnect_max_attempts=2))
    trace = flaky(policy, [("start", 0), ("down", 0), ("up", 0), ("down", 0), ("up", 0), ("down", 0)])
    assert [state for state, _ in trace] == ["starting", "reconnecting", "running", "reconnecting", "running", "failed"]
    policy = ListenerPolicy(ListenerSettings(reconnect_max_attempts=2))
    trace = flaky(policy, [("start", 0), ("down", 0), ("up", 0), ("page", 0), ("down", 0), ("down", 0), ("down", 0)])
    assert [state for state, _ in trace] == [
        "starting",
        "reconnecting",
        "running",
        "running",  # the page committed: the budget of 2 is whole again
        "reconnecting",
        "reconnecting",
        "failed",
    ]


def test_a_page_committed_before_the_connection_opened_restores_nothing():
    policy = ListenerPolicy(ListenerSettings(reconnect_max_attempts=1))
    trace = flaky(policy, [("start", 0), ("down", 0), ("start", 0), ("page", 0), ("up", 0), ("down", 0)])
    assert trace[-1] == ("failed", None)  # only a page committed while running counts


def test_a_stable_run_or_a_committed_page_restores_the_budget_and_delays_are_capped():
    settings = ListenerSettings(reconnect_initial_ms=10_000, reconnect_max_ms=15_000, reconnect_max_attempts=3)
    policy = ListenerPolicy(settings)
    trace = flaky(policy, [("start", 0), ("down", 0), ("down", 0), ("up", 0), ("down", 60 * SECOND)])
    assert [delay for _, delay in trace] == [None, 10_000, 15_000, None, 10_000]  # stable 60 s: budget back
    trace = flaky(policy, [("up", 61 * SECOND), ("page", 62 * SECOND), ("down", 63 * SECOND)])
    assert trace[-1] == ("reconnecting", 10_000)


def test_authorization_failure_fails_at_once_and_is_recorded_on_the_account(store, shop):
    policy = ListenerPolicy(ListenerSettings(reconnect_max_attempts=20))
    assert flaky(policy, [("start", 0), ("auth", 0)])[-1] == ("failed", None)
    assert policy.last_error == "DINGTALK_AUTH_FAILED" and policy.authorization_failed
    with store.write() as conn:
        record_listener_state(conn, shop, policy)
    assert account_facts(store, shop) == ("failed", "DINGTALK_AUTH_FAILED", "failed")


def test_an_exhausted_budget_leaves_the_authorization_alone(store, shop):
    policy = ListenerPolicy(ListenerSettings(reconnect_max_attempts=1))
    flaky(policy, [("start", 0), ("down", 0), ("start", 0), ("down", 0)])
    with store.write() as conn:
        record_listener_state(conn, shop, policy)
    assert account_facts(store, shop) == ("failed", "KEFU_LISTENER_RETRIES_EXHAUSTED", "ready")


def test_zero_attempts_means_no_reconnect():
    policy = ListenerPolicy(ListenerSettings(reconnect_max_attempts=0))
    assert flaky(policy, [("start", 0), ("down", 0)])[-1] == ("failed", None)
    policy = ListenerPolicy(ListenerSettings(reconnect_max_attempts=0))
    assert flaky(policy, [("start", 0), ("up", 0), ("down", 0)])[-1] == ("failed", None)  # not even after a run


def test_stop_cancels_retries_and_silence_past_the_heartbeat_window_is_a_dead_connection(store, shop):
    policy = ListenerPolicy(ListenerSettings(heartbeat_timeout_ms=5_000))
    flaky(policy, [("start", 0), ("up", 0)])
    assert not policy.heartbeat_expired(now_ms=5_000, last_heartbeat_ms=0)
    assert policy.heartbeat_expired(now_ms=5_001, last_heartbeat_ms=0)
    assert flaky(policy, [("stop", 6_000), ("down", 6_001)]) == [("stopped", None), ("stopped", None)]
    with store.write() as conn:
        record_listener_state(conn, shop, policy)
    with store.read() as conn:
        assert conn.execute("SELECT listener_state FROM account WHERE id = :a", {"a": shop}).scalar() == "stopped"


def test_a_max_delay_below_the_initial_one_stops_startup_naming_both_variables(tmp_path):
    from config import SettingsError, load_settings

    try:
        load_settings(data_dir=tmp_path, listener={"reconnect_initial_ms": 5000, "reconnect_max_ms": 1000})
    except SettingsError as error:
        assert "KEFU_LISTENER__RECONNECT_MAX_MS" in str(error) and "RECONNECT_INITIAL_MS" in str(error)
    else:
        raise AssertionError("accepted a max delay below the initial delay")
