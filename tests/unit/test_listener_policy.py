"""The listener's reconnect policy (SPEC 3.11) against a scripted flaky connection."""

from __future__ import annotations

from config import ListenerSettings
from runtime.listener_policy import ListenerPolicy, record_listener_state
from runtime.store.sql import sql

SECOND = 1000


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


def test_fails_twice_runs_then_fails_until_the_budget_is_spent():
    policy = ListenerPolicy(ListenerSettings())
    trace = flaky(
        policy,
        [
            ("start", 0),
            ("down", 0),
            ("down", 1 * SECOND),
            ("up", 3 * SECOND),
            ("down", 10 * SECOND),
            ("down", 15 * SECOND),
        ],
    )
    assert trace == [
        ("starting", None),
        ("reconnecting", 1000),
        ("reconnecting", 2000),
        ("running", None),  # a short run does not restore the budget
        ("reconnecting", 4000),
        ("failed", None),
    ]
    assert policy.last_error == "KEFU_LISTENER_RETRIES_EXHAUSTED"


def test_a_stable_run_or_a_committed_page_restores_the_budget_and_delays_are_capped():
    settings = ListenerSettings(reconnect_initial_ms=10_000, reconnect_max_ms=15_000, reconnect_max_attempts=3)
    policy = ListenerPolicy(settings)
    trace = flaky(policy, [("start", 0), ("down", 0), ("down", 0), ("up", 0), ("down", 60 * SECOND)])
    assert [delay for _, delay in trace] == [None, 10_000, 15_000, None, 10_000]  # stable 60 s: budget back
    trace = flaky(policy, [("up", 61 * SECOND), ("page", 62 * SECOND), ("down", 63 * SECOND)])
    assert trace[-1] == ("reconnecting", 10_000)


def test_authorization_failure_fails_at_once():
    policy = ListenerPolicy(ListenerSettings(reconnect_max_attempts=20))
    assert flaky(policy, [("start", 0), ("auth", 0)])[-1] == ("failed", None)
    assert policy.last_error == "DINGTALK_AUTH_FAILED"


def test_zero_attempts_means_no_reconnect():
    policy = ListenerPolicy(ListenerSettings(reconnect_max_attempts=0))
    assert flaky(policy, [("start", 0), ("down", 0)])[-1] == ("failed", None)


def test_stop_cancels_retries_and_silence_past_the_heartbeat_window_is_a_dead_connection(store, shop):
    policy = ListenerPolicy(ListenerSettings(heartbeat_timeout_ms=5_000))
    flaky(policy, [("start", 0), ("up", 0)])
    assert not policy.heartbeat_expired(now_ms=5_000, last_heartbeat_ms=0)
    assert policy.heartbeat_expired(now_ms=5_001, last_heartbeat_ms=0)
    assert flaky(policy, [("stop", 6_000), ("down", 6_001)]) == [("stopped", None), ("stopped", None)]
    with store.write() as conn:
        record_listener_state(conn, shop, policy)
    with store.read() as conn:
        assert conn.execute(sql("SELECT listener_state FROM account WHERE id = :a"), {"a": shop}).scalar() == "stopped"


def test_a_max_delay_below_the_initial_one_stops_startup_naming_both_variables(tmp_path):
    from config import SettingsError, load_settings

    try:
        load_settings(data_dir=tmp_path, listener={"reconnect_initial_ms": 5000, "reconnect_max_ms": 1000})
    except SettingsError as error:
        assert "KEFU_LISTENER__RECONNECT_MAX_MS" in str(error) and "RECONNECT_INITIAL_MS" in str(error)
    else:
        raise AssertionError("accepted a max delay below the initial delay")
