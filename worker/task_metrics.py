"""Per-task run counts and run time, added to the store's counters (runtime.operators.counters)
and exposed by the console's `/metrics` (`kefu_task_runs`, `kefu_task_seconds`).

Why the store and not an HTTP endpoint in the worker: a prefork worker runs its tasks in pool
processes, whose in-memory metrics its main process cannot see (prometheus-client would need
its multiprocess mode and a directory to clean at each start); the store is the shard's one
place every process already writes, one scrape target per shard, and survives restarts.

Cost: tallies are kept in the process and added in one small transaction at most every
FLUSH_S (and when the process shuts down), not a write per task: an idle worker's housekeeping
would otherwise commit every few seconds. A process killed outright loses its last FLUSH_S of
tallies, never counts twice."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from celery.signals import task_postrun, task_prerun, worker_process_shutdown, worker_shutdown

from runtime.operators.counters import add_counts

FLUSH_S = 10.0

_lock = threading.Lock()
_started: dict[str, float] = {}  # task id -> monotonic start
_tally: dict[tuple[str, tuple[str, ...]], float] = {}
_flushed_at = time.monotonic()
_app: Any = None  # the app whose tasks ran here: its runtime's store takes the tallies


@task_prerun.connect
def _started_run(task_id: str | None = None, **_: Any) -> None:
    if task_id is not None:
        _started[task_id] = time.monotonic()


@task_postrun.connect
def _finished_run(task_id: str | None = None, task: Any = None, state: str | None = None, **_: Any) -> None:
    """Celery sends this after every run, a failed one too (`state` FAILURE, RETRY, ...)."""
    began = _started.pop(task_id, None) if task_id is not None else None
    name = str(getattr(task, "name", None) or "unknown")
    global _app
    with _lock:
        _app = getattr(task, "app", None) or _app
        _add(("task_runs", (name, state or "UNKNOWN")), 1)
        if began is not None:
            _add(("task_seconds_count", (name,)), 1)
            _add(("task_seconds_sum", (name,)), time.monotonic() - began)
    if time.monotonic() - _flushed_at >= FLUSH_S:
        flush()


def _add(key: tuple[str, tuple[str, ...]], value: float) -> None:
    _tally[key] = _tally.get(key, 0) + value


@worker_process_shutdown.connect
@worker_shutdown.connect
def flush(**_: Any) -> None:
    """Add what this process tallied to the store; kept for the next try if the store refuses."""
    global _flushed_at
    with _lock:
        taken = dict(_tally)
        _tally.clear()
        _flushed_at = time.monotonic()
    if not taken or _app is None:
        return
    try:
        from worker.context import runtime_for

        store = runtime_for(_app).store
        add_counts(store, [(name, labels, value) for (name, labels), value in taken.items()])
    except Exception as error:  # metrics never fail a task: the tallies wait for the next flush
        logging.getLogger(__name__).warning("task metrics not stored (%s)", type(error).__name__)
        with _lock:
            for key, value in taken.items():
                _add(key, value)
