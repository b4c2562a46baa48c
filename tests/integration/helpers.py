"""Helpers shared by the integration tests."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from config import Settings
from runtime.store import DeliveryStore
from transports.simulator import SimulatedPlatform
from worker.audit import Audit, audit


def wait_for(
    condition: Callable[[], bool], timeout_s: float, what: str, describe: Callable[[], object] = lambda: ""
) -> None:
    """Poll until `condition()`; on time-out say what was awaited and, if given, the state."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what} {describe()}")
        time.sleep(0.05)


RECONCILE = "kefu.ingest.reconcile"


def finished_runs(log: Path, task: str) -> int:
    """How many runs of `task` a worker's log (`-l info`) shows finished."""
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    return len(re.findall(rf"Task {re.escape(task)}\[[^\]]+\] succeeded", text))


def wait_runs(log: Path, task: str = RECONCILE, runs: int = 2, timeout_s: float = 60) -> None:
    """Until `runs` whole runs of the worker's `task` (the reconciler's pass by default) began
    and finished from now on. Waits on what would show a duplicate (the pass that re-attempts,
    re-admits or republishes), never on the clock, so a slow machine only waits longer."""
    start = finished_runs(log, task)  # one more: a run under way now may have begun before
    wait_for(lambda: finished_runs(log, task) > start + runs, timeout_s, f"{runs} more runs of {task}")


def wait_all_answered(store: DeliveryStore, platform: SimulatedPlatform, account: str, timeout_s: float = 30) -> Audit:
    result: list[Audit] = []

    def answered() -> bool:
        result[:] = [audit(store, platform, account)]
        return result[0].answered == result[0].buyer_messages

    wait_for(answered, timeout_s, "every buyer message to be answered")
    return result[0]


def worker_env(settings: Settings, **extra: str) -> dict[str, str]:
    """A test worker's environment: fast reconciling and listener supervision, plus `extra`."""
    return {
        "KEFU_DATA_DIR": str(settings.data_dir),
        "KEFU_BROKER_URL": settings.broker_url,
        "KEFU_RECONCILE__INTERVAL_S": "0.5",
        "KEFU_RECONCILE__GRACE_S": "2",
        "KEFU_LISTENER__SUPERVISE_INTERVAL_MS": "100",
        **extra,
    }
