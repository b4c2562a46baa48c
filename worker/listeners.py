"""Listeners (SPEC 3.11): one long-lived platform connection per live account, supervised.

`runtime.accounts.listener_policy` decides states and delays; this shell runs it with real connections,
real sleeps and the wall clock, one thread per account. A supervisor thread starts a listener
for every account that should have one (and whose per-account lease it wins, so two worker
processes never both listen) and stops it when the account is disconnected, deleted or
changed, and at shutdown. Stopping cancels a pending retry and closes the connection, and
nothing a closed connection received is published.

Everything received is recorded in the delivery store and published to the broker first
(worker.dispatch), and acknowledged to the platform right after, never later: a late ACK is
what makes platforms redeliver.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from celery import Celery

from config import ListenerSettings
from runtime.accounts.listener_policy import ListenerPolicy, ListenerState, committed_since, record_listener_state
from runtime.accounts.registry import listening_accounts
from runtime.errors import KefuError
from runtime.inbound.ingest import committed_cursor
from runtime.ports import ListenerConnection, ListenerFailure, Received, Transport
from runtime.store import DeliveryStore, leases, now_ms
from runtime.store.tables import Account
from worker.context import runtime_for
from worker.dispatch import Publish, broker_publisher

log = logging.getLogger(__name__)

RECEIVE_WAIT_S = 0.25  # how long one receive may block: bounds how late a stop or heartbeat check is
COMMIT_CHECK_MS = 1000  # how often a listener that spent some of its reconnect budget looks for a committed page


@dataclass(frozen=True)
class ListenerChange:
    account_id: str
    state: ListenerState
    code: str | None = None
    delay_ms: int | None = None  # before the next connection attempt

    def describe(self) -> str:
        text = f"listener {self.account_id}: {self.state}"
        if self.code:
            text += f" ({self.code})"
        if self.delay_ms is not None:
            text += f", next attempt in {self.delay_ms} ms"
        return text


Observe = Callable[[ListenerChange], None]


def _ignore(_: ListenerChange) -> None:
    return None


class AccountListener:
    """One account's connection loop, in a thread of its own."""

    def __init__(
        self,
        account: Account,
        transport: Transport,
        store: DeliveryStore,
        publish: Publish,
        settings: ListenerSettings,
        observe: Observe = _ignore,
    ) -> None:
        self.account_id = account.id
        self.revision = account.revision
        self.policy = ListenerPolicy(settings)
        self._transport = transport
        self._store = store
        self._publish = publish
        self._observe = observe
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._connection: ListenerConnection | None = None
        self._thread = threading.Thread(target=self._run, name=f"kefu-listener-{account.id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Cancel any pending retry, close the connection, wait for the thread to end."""
        self._stopping.set()
        self._close()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                delay_ms = self._session()
                if delay_ms is None or self._stopping.wait(delay_ms / 1000):
                    break
        except Exception as error:  # a bug: say which, never its text (it may hold message data)
            log.error("listener %s crashed (%s)", self.account_id, type(error).__name__)
            self.policy.state, self.policy.last_error = "failed", "KEFU_LISTENER_CRASHED"
            self._change()
        finally:
            self._close()
            if self.policy.state != "failed":
                self.policy.stop()
                self._change()

    def _session(self) -> int | None:
        """Connect and deliver until the connection fails. Returns the delay before the next
        attempt, or None when the listener stops here (stopped or failed)."""
        self.policy.start()
        self._change()
        try:
            cursor = committed_cursor(self._store, self.account_id, self._transport.stream_id)
            connection = self._transport.connect(self.account_id, cursor)
            with self._lock:
                self._connection = connection
            if self._stopping.is_set():
                return None
            self.policy.connected(now_ms())
            self._change()
            self._deliver(connection)
            return None
        except ListenerFailure as failure:
            code, authorization, final = failure.code, failure.authorization, False
            self._look_for_commits()  # a page committed late in the run still proves it worked
        except KefuError as error:  # missing credentials and the like: an operator must act first
            code, authorization, final = error.code, False, True
        except OSError as error:  # the network: the class only, its text may carry addresses or secrets
            log.warning("listener %s: connection error %s", self.account_id, type(error).__name__)
            code, authorization, final = "KEFU_LISTENER_CONNECTION_LOST", False, False
            self._look_for_commits()
        finally:
            self._close()
        if self._stopping.is_set():
            return None
        delay_ms = self.policy.failed(now_ms(), code, authorization, final)
        self._change(delay_ms)
        return delay_ms

    def _deliver(self, connection: ListenerConnection) -> None:
        last_heard = now_ms()
        next_commit_check = 0
        while not self._stopping.is_set():
            if self.policy.heartbeat_expired(now_ms(), last_heard):
                raise ListenerFailure("KEFU_LISTENER_HEARTBEAT_LOST")
            event = connection.receive(RECEIVE_WAIT_S)
            if self._stopping.is_set():
                return  # a stopped listener publishes nothing more
            if event is None:
                continue
            last_heard = now_ms()
            if isinstance(event, Received):
                try:
                    self._publish(event.item)
                except Exception as error:  # not acknowledged: the platform redelivers
                    log.warning("listener %s: publishing failed (%s)", self.account_id, type(error).__name__)
                    raise ListenerFailure("KEFU_LISTENER_PUBLISH_FAILED") from None
                try:
                    event.ack()
                except Exception as error:  # published: a lost ACK only means a redelivery, deduped
                    log.warning("listener %s: acknowledging failed (%s)", self.account_id, type(error).__name__)
            if not self.policy.healthy() and last_heard >= next_commit_check:
                next_commit_check = last_heard + COMMIT_CHECK_MS
                self._look_for_commits()

    def _look_for_commits(self) -> None:
        """A page of the account committed during this run restores the reconnect budget and
        the initial delay (SPEC 3.11); a run without one must last `reconnect_stable_ms`."""
        since = self.policy.running_since
        if self.policy.state != "running" or since is None or self.policy.healthy():
            return
        with self._store.read() as conn:
            if committed_since(conn, self.account_id, since):
                self.policy.page_committed()

    def _close(self) -> None:
        with self._lock:
            connection, self._connection = self._connection, None
        if connection is not None:
            try:
                connection.close()
            except Exception as error:  # closing is best effort; the state says what matters
                log.warning("listener %s: closing failed (%s)", self.account_id, type(error).__name__)

    def _change(self, delay_ms: int | None = None) -> None:
        change = ListenerChange(self.account_id, self.policy.state, self.policy.last_error, delay_ms)
        with self._store.write() as conn:
            record_listener_state(conn, self.account_id, self.policy)
        log.info(change.describe())
        self._observe(change)


class ListenerSupervisor:
    """Keeps exactly the listeners the delivery store asks for running in this process."""

    def __init__(
        self,
        store: DeliveryStore,
        transport_for: Callable[[str], Transport],
        publish: Publish,
        settings: ListenerSettings,
        observe: Observe = _ignore,
    ) -> None:
        self._store = store
        self._transport_for = transport_for
        self._publish = publish
        self._settings = settings
        self._observe = observe
        self._owner = leases.new_owner()
        self._listeners: dict[str, AccountListener] = {}
        self._unavailable: set[tuple[str, int]] = set()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kefu-listeners", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        for account_id in list(self._listeners):
            self._stop(account_id)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.supervise()
            except Exception:
                log.exception("listener supervision failed; trying again next interval")
            self._stopping.wait(self._settings.supervise_interval_ms / 1000)

    def supervise(self) -> None:
        """One pass: stop listeners that should no longer run, start the missing ones."""
        with self._store.read() as conn:
            wanted = {account.id: account for account in listening_accounts(conn)}
        for account_id, listener in list(self._listeners.items()):
            account = wanted.get(account_id)
            if account is None or account.revision != listener.revision or not self._hold(account_id):
                self._stop(account_id)
        for account_id, account in wanted.items():
            if account_id not in self._listeners and self._hold(account_id):
                self._start(account)

    def _start(self, account: Account) -> None:
        try:
            transport = self._transport_for(account.platform)
        except KefuError as error:
            if (account.id, account.revision) not in self._unavailable:
                self._unavailable.add((account.id, account.revision))
                log.error("listener %s: %s", account.id, error)
                with self._store.write() as conn:
                    policy = ListenerPolicy(self._settings, state="failed", last_error=error.code)
                    record_listener_state(conn, account.id, policy)
            leases.release(self._store, self._lease(account.id), self._owner)
            return
        listener = AccountListener(account, transport, self._store, self._publish, self._settings, self._observe)
        self._listeners[account.id] = listener
        listener.start()

    def _stop(self, account_id: str) -> None:
        self._listeners.pop(account_id).stop()
        leases.release(self._store, self._lease(account_id), self._owner)

    def _hold(self, account_id: str) -> bool:
        """Take or renew this process's lease on the account's listener."""
        return leases.acquire(self._store, self._lease(account_id), self._owner, self._settings.lease_s)

    @staticmethod
    def _lease(account_id: str) -> str:
        return f"listener:{account_id}"


def build_supervisor(app: Celery, observe: Observe = _ignore) -> ListenerSupervisor:
    runtime = runtime_for(app)
    return ListenerSupervisor(
        runtime.store, runtime.transport, broker_publisher(app), runtime.settings.listener, observe
    )
