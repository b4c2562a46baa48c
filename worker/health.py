"""The worker's own health check: a heartbeat file its consumer rewrites every BEAT_S while it
holds a broker connection, and `kefu health`, which reads it (no broker round trip: `celery
inspect ping` asks every worker over the broker and took 9 s of compose's 10 s budget).

The beat runs on the consumer's timer, so a consumer that stopped (a lost broker, a wedged
event loop) stops beating; a worker that shuts down cleanly removes its file."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from celery import bootsteps
from celery.signals import worker_init

BEAT_S = 5.0
STALE_S = 30.0  # `kefu health`'s default: six beats missed


def heartbeat_path(data_dir: Path, node: str) -> Path:
    """Where node `node` (celery@host) beats, under the data dir's `health/`."""
    return data_dir / "health" / f"{node.replace('/', '_')}.beat"


class HeartbeatStep(bootsteps.StartStopStep):  # type: ignore[misc]  # celery is untyped: the base is Any
    label = "kefu heartbeat"
    requires = ("celery.worker.consumer.connection:Connection",)

    def __init__(self, parent: Any, **options: Any) -> None:
        super().__init__(parent, **options)
        self.path = heartbeat_path(parent.app.kefu_settings.data_dir, parent.hostname)
        self.timer: Any = None

    def start(self, parent: Any) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._beat(parent)
        self.timer = parent.timer.call_repeatedly(BEAT_S, self._beat, (parent,), priority=10)

    def stop(self, parent: Any) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.path.unlink(missing_ok=True)

    shutdown = stop

    def _beat(self, parent: Any) -> None:
        connection = parent.connection
        if connection is None or not connection.connected:
            return  # no broker: no beat, and the file ages into unhealthy
        try:
            beat = self.path.with_suffix(".tmp")
            beat.write_text(json.dumps({"pid": os.getpid(), "at": time.time()}))
            beat.replace(self.path)
        except OSError as error:
            logging.getLogger(__name__).warning("heartbeat not written (%s)", type(error).__name__)


@worker_init.connect
def _install(sender: Any = None, **_: Any) -> None:
    """worker_init comes before the worker builds its consumer, which takes its steps then."""
    if sender is not None and hasattr(sender.app, "kefu_settings"):
        sender.app.steps["consumer"].add(HeartbeatStep)


def beat_age(path: Path, now: float | None = None) -> float | None:
    """Seconds since the last beat at `path`, None when there is none (or it is unreadable)."""
    try:
        at = float(json.loads(path.read_text())["at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (time.time() if now is None else now) - at
