"""A listener's lifecycle and reconnect budget (SPEC 3.11), as a pure state machine.

stopped → starting → running → reconnecting → … → failed. A recoverable failure reconnects
after an exponential delay (initial, doubling, capped); the budget of attempts resets only
after a run of `reconnect_stable_ms` or a page committed while running. An authorization
failure, or an exhausted budget, ends in `failed` with a safe error code. Stopping (pause,
disconnect, removal, shutdown) cancels any pending retry. A connection silent for longer than
the heartbeat window is dead, and is treated as a recoverable failure.

The worker's listener shell drives this with real connections and a real clock; tests drive
it with scripted ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlalchemy import Connection

from config import ListenerSettings
from runtime.store.sql import sql

ListenerState = Literal["stopped", "starting", "running", "reconnecting", "failed"]


class ListenerFailure(Exception):
    """A listening connection could not be opened or was lost. `code` is safe to show and
    store (never a secret, cursor or message text); `authorization` failures are final."""

    def __init__(self, code: str, authorization: bool = False) -> None:
        super().__init__(code)
        self.code = code
        self.authorization = authorization


@dataclass
class ListenerPolicy:
    settings: ListenerSettings
    state: ListenerState = "stopped"
    attempts: int = 0  # reconnects spent from the budget
    running_since: int | None = None
    last_error: str | None = None

    def start(self) -> ListenerState:
        self.state, self.last_error = "starting", None
        return self.state

    def connected(self, now_ms: int) -> ListenerState:
        self.state, self.running_since = "running", now_ms
        return self.state

    def page_committed(self) -> None:
        """A page committed while running proves the connection works: the budget is restored."""
        if self.state == "running":
            self.attempts = 0

    def heartbeat_expired(self, now_ms: int, last_heartbeat_ms: int) -> bool:
        return self.state == "running" and now_ms - last_heartbeat_ms > self.settings.heartbeat_timeout_ms

    def failed(self, now_ms: int, code: str, authorization: bool = False) -> int | None:
        """The connection failed with a safe `code`. Returns the delay before reconnecting, or
        None when the listener is now `failed` (or was stopped meanwhile)."""
        if self.state == "stopped":
            return None
        s = self.settings
        if self.running_since is not None and now_ms - self.running_since >= s.reconnect_stable_ms:
            self.attempts = 0  # a stable run restores the budget
        self.running_since = None
        if authorization:
            self.state, self.last_error = "failed", code
            return None
        if self.attempts >= s.reconnect_max_attempts:
            self.state, self.last_error = "failed", "KEFU_LISTENER_RETRIES_EXHAUSTED"
            return None
        delay = min(s.reconnect_initial_ms * 2**self.attempts, s.reconnect_max_ms)
        self.attempts += 1
        self.state, self.last_error = "reconnecting", code
        return delay

    def stop(self) -> ListenerState:
        """Pause, disconnect, removal or shutdown: no retry is pending after this."""
        self.state, self.running_since, self.last_error = "stopped", None, None
        return self.state


def committed_since(conn: Connection, account_id: str, since_ms: int) -> bool:
    """Whether a page of the account committed its cursor at or after `since_ms`."""
    latest = conn.execute(
        sql("SELECT max(updated_at) FROM provider_cursor WHERE account_id = :a"), {"a": account_id}
    ).scalar_one()
    return latest is not None and latest >= since_ms


def record_listener_state(conn: Connection, account_id: str, policy: ListenerPolicy) -> None:
    """Make the state visible to operators (`kefu status`) and to other processes."""
    conn.execute(
        sql("UPDATE account SET listener_state = :s, last_error = :e WHERE id = :a"),
        {"s": policy.state, "e": policy.last_error, "a": account_id},
    )
