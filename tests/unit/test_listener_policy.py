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


def test_failures_to_connect_spend_the_budget_and_a_connection_restores_it_but_not_the_initial_delay():
    policy = ListenerPolicy(ListenerSettings())
    trace = flaky(
        policy,
        [
            ("start", 0),
            ("down", 0),
            ("down", 1 * SECOND),
            ("up", 3 * SECOND),  # connected: the budget is whole again
            ("down", 10 * SECOND),
            ("down", 15 * SECOND),
            ("down", 30 * SECOND),
            ("down", 50 * SECOND),
        ],
    )
    assert trace == [
        ("starting", None),
        ("reconnecting", 1000),
        ("reconnecting", 2000),
        ("running", None),
        ("reconnecting", 4000),  # a short run does not restore the initial delay
        ("reconnecting", 8000),
        ("reconnecting", 16000),
        ("failed", None),  # three failures to connect in a row
    ]
    assert policy.last_error == "KEFU_LISTENER_RETRIES_EXHAUSTED"


def test_twenty_drops_each_followed_by_a_successful_reconnect_never_fail_and_the_delay_stays_capped():
    settings = ListenerSettings(reconnect_initial_ms=100, reconnect_max_ms=1600, reconnect_max_attempts=3)
    policy = ListenerPolicy(settings)
    flaky(policy, [("start", 0), ("up", 0)])
    script = [(event, n * SECOND) for n in range(1, 21) for event in ("down", "start", "up")]
    trace = flaky(policy, script)
    delays = [delay for _, delay in trace if delay is not None]
    assert delays == [100, 200, 400, 800] + [1600] * 16
    assert trace[-1] == ("running", None) and "failed" not in {state for state, _ in trace}
    assert policy.attempts == 4  # doublings stop at the cap: nothing grows without bound


def test_the_budget_counts_failures_since_the_last_connection_not_since_the_start():
    policy = ListenerPolicy(ListenerSettings(reconnect_max_attempts=2))
    trace = flaky(policy, [("start", 0), ("down", 0), ("down", 0), ("up", 0), ("down", 0), ("down", 0), ("down", 0)])
    assert [state for state, _ in trace] == [
        "starting",
        "reconnecting",
        "reconnecting",
        "running",
        "reconnecting",
        "reconnecting",
        "failed",
    ]


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
