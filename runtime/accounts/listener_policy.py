"""A listener's lifecycle and reconnect budget (SPEC 3.11), as a pure state machine.

stopped → starting → running → reconnecting → … → failed. A recoverable failure reconnects
after an exponential delay (initial, doubling, capped). The budget counts failures since the
listener last proved healthy: a run of `reconnect_stable_ms`, or a page committed while running.
Only those restore it (and the initial delay); a connection that merely opens does not, so a
connection that opens and drops every few seconds (flapping) spends the budget like failures to
connect do, and `reconnect_max_attempts` failures without a healthy run in between end in
`failed` (KEFU_LISTENER_RETRIES_EXHAUSTED), which raises the operators' alert. An authorization
failure, or an exhausted budget, ends in `failed` with a safe error code; an authorization
failure is also recorded on the account, which then needs an operator. Stopping (pause,
disconnect, removal, shutdown) cancels any pending retry. A connection silent for longer than
the heartbeat window is dead, and is treated as a recoverable failure.

A platform's own request to reconnect (DingTalk's SYSTEM `disconnect`) is no failure at all:
the transport hands the session over to a new connection without the listener noticing.

The worker's listener shell drives this with real connections and a real clock; tests drive
it with scripted ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from config import ListenerSettings
from config.retries import listener_reconnect
from runtime.store import queries
from runtime.store.connection import Connection

ListenerState = Literal["stopped", "starting", "running", "reconnecting", "failed"]


@dataclass
class ListenerPolicy:
    settings: ListenerSettings
    state: ListenerState = "stopped"
    attempts: int = 0  # doublings of the delay since the last stable run or committed page
    failures: int = 0  # failures since the last stable run or committed page: the budget spent
    running_since: int | None = None
    last_error: str | None = None
    authorization_failed: bool = False  # the platform refused the credentials

    def start(self) -> ListenerState:
        self.state, self.last_error, self.authorization_failed = "starting", None, False
        return self.state

    def connected(self, now_ms: int) -> ListenerState:
        """The connection is open. Neither the budget nor the delay is restored yet: only a
        stable run or a committed page proves the connection works, so one that opens and
        drops at once keeps spending the budget and backing off."""
        self.state, self.running_since = "running", now_ms
        return self.state

    def page_committed(self) -> None:
        """A page committed while running proves the connection works: the budget is whole
        again and the next failure reconnects after the initial delay."""
        if self.state == "running":
            self.attempts = self.failures = 0

    def healthy(self) -> bool:
        """Nothing of the budget or the delay is spent: no commit check can change anything."""
        return self.attempts == 0 and self.failures == 0

    def heartbeat_expired(self, now_ms: int, last_heartbeat_ms: int) -> bool:
        return self.state == "running" and now_ms - last_heartbeat_ms > self.settings.heartbeat_timeout_ms

    def failed(self, now_ms: int, code: str, authorization: bool = False, final: bool = False) -> int | None:
        """The connection failed with a safe `code`. Returns the delay before reconnecting, or
        None when the listener is now `failed` (or was stopped meanwhile). `final`: no retry
        can help (e.g. no credentials are stored) though the platform refused nothing."""
        if self.state == "stopped":
            return None
        s = self.settings
        if self.running_since is not None and now_ms - self.running_since >= s.reconnect_stable_ms:
            self.attempts = self.failures = 0  # a stable run restores the budget and the initial delay
        self.running_since = None
        if authorization or final:
            self.state, self.last_error, self.authorization_failed = "failed", code, authorization
            return None
        if self.failures >= s.reconnect_max_attempts:
            self.state, self.last_error = "failed", "KEFU_LISTENER_RETRIES_EXHAUSTED"
            return None
        delay = round(listener_reconnect(s.reconnect_initial_ms, s.reconnect_max_ms).wait_s(self.attempts + 1) * 1000)
        if delay < s.reconnect_max_ms:
            self.attempts += 1  # capped: no more doubling to remember
        self.failures += 1
        self.state, self.last_error = "reconnecting", code
        return delay

    def stop(self) -> ListenerState:
        """Pause, disconnect, removal or shutdown: no retry is pending after this."""
        self.state, self.running_since, self.last_error = "stopped", None, None
        return self.state


def committed_since(conn: Connection, account_id: str, since_ms: int) -> bool:
    """Whether a page of the account committed its cursor at or after `since_ms`."""
    latest = conn.execute(queries.provider_cursor.LAST_COMMITTED_AT, {"a": account_id}).scalar_one()
    return latest is not None and latest >= since_ms


def record_listener_state(conn: Connection, account_id: str, policy: ListenerPolicy) -> None:
    """Make the state visible to operators (`kefu status`) and to other processes. Refused
    credentials also mark the account's authorization `failed`: the account stops listening
    and sending until an operator gives it working credentials."""
    conn.execute(
        queries.account.RECORD_LISTENER_STATE,
        {"s": policy.state, "e": policy.last_error, "refused": policy.authorization_failed, "a": account_id},
    )
