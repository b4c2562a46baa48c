"""Helpers shared by the integration tests."""

from __future__ import annotations

import time
from collections.abc import Callable

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
