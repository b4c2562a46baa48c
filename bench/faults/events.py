"""Which worker holds which task right now, from Celery's own task events (workers send them:
`worker_send_task_events`). The kill schedule uses it to aim a main-process kill at a worker
that has a page in flight: only then is the window in which the broker can lose a page open."""

from __future__ import annotations

import threading
import time
from typing import Any

from celery import Celery

IN_FLIGHT_FOR_S = 10.0  # an event older than this without an outcome is forgotten (its worker died)
DONE = ("task-succeeded", "task-failed", "task-rejected", "task-revoked", "task-retried")


class TaskTracker:
    def __init__(self, app: Celery) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._in_flight: dict[str, tuple[str, str, float]] = {}  # uuid → (task name, hostname, since)
        self._started: set[str] = set()  # uuids a pool process has begun executing
        self._receiver: Any = None
        self.events = 0  # task events seen
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faults-task-events", daemon=True)

    def start(self) -> TaskTracker:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._receiver is not None:
            self._receiver.should_stop = True
        self._thread.join(3)

    def holders(self, task: str, waiting_only: bool = False) -> set[str]:
        """Hostnames of the workers holding a `task` that has not finished (`waiting_only`:
        that no pool process has begun executing either, so none of its work is done)."""
        cutoff = time.monotonic() - IN_FLIGHT_FOR_S
        with self._lock:
            return {
                host
                for uuid, (name, host, since) in self._in_flight.items()
                if name == task and since > cutoff and not (waiting_only and uuid in self._started)
            }

    def _received(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.events += 1
            self._in_flight[event["uuid"]] = (event.get("name", ""), event.get("hostname", ""), time.monotonic())

    def _began(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.events += 1
            self._started.add(event.get("uuid", ""))

    def _done(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.events += 1
            self._in_flight.pop(event.get("uuid", ""), None)
            self._started.discard(event.get("uuid", ""))

    def _run(self) -> None:
        handlers = {"task-received": self._received, "task-started": self._began, **{kind: self._done for kind in DONE}}
        while not self._stopping.is_set():
            try:
                with self.app.connection_for_read() as connection:
                    self._receiver = self.app.events.Receiver(connection, handlers=handlers)
                    self._receiver.capture(limit=None, timeout=None, wakeup=False)
            except Exception:  # the broker went away (a restart): listen again shortly
                self._stopping.wait(0.5)
