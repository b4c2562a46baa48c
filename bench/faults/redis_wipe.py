"""redis-wipe: Redis is a cache of coordination, not its memory (issue 35).

With kefu's default settings (no shortened lease or interval) and a Redis without persistence,
the host of the shard is restarted once (every process stops and starts: the next grant of the
shard's lease is grant 2, and the store's fence sees it), then Redis is SIGKILLed and comes back
empty under traffic: the lease, the grant counter (which would start again at 1, below the
store's fence), the account directory and every queued broker message are gone. The shard's
processes must take a grant above the fence (each restarts at most once), the directory must
come back from the store, and every buyer must be answered exactly once.

Below the table: the store's fence before the wipe and at the end, the directory's entry at the
end, and the time from the wipe to the last reply (the wipe comes late in the workload, so the
last reply is a stranded buyer's).
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from bench.faults.options import Options
from bench.faults.report import RunReport
from bench.faults.rig import Rig, RigConfig, Say
from bench.faults.traffic import run_traffic
from bench.faults.workload import Workload
from runtime.store import DeliveryStore
from worker.coordination import coordinator_for

RESTART_AT = 0.1  # of the workload's window: the host restart
WIPE_AT = 0.6  # the wipe; offering goes on after it
FENCE_BOUND_S = 60.0
# Quiet and unchanged this long before what is left counts as lost: with the defaults, a page
# whose broker message Redis lost is received again by the reconciler after its 30 s grace
# (every 10 s), and a killed listener's account lease lapses after 30 s.
STALL_S = 75.0
RECOVERY_BOUND_S = 60.0
EXITS_PER_PROCESS = 2  # after one host restart and one wipe: more is an exit loop


def store_fence(store: DeliveryStore) -> int:
    with store.read() as conn:
        token = conn.execute("SELECT token FROM shard_fence WHERE id = 1").scalar()
    return int(token or 0)


def _wait_for_fence(rig: Rig, at_least: int) -> int:
    """Until the store's fence has seen grant `at_least` (the first write under it), bounded."""
    deadline = time.monotonic() + FENCE_BOUND_S
    while (token := store_fence(rig.store)) < at_least and time.monotonic() < deadline:
        time.sleep(0.2)
    return token


def _wait_for_directory(rig: Rig) -> float:
    """Until the directory has the account's entry again (bounded); the wall time it came back."""
    coordinator = coordinator_for(rig.settings)
    deadline = time.monotonic() + FENCE_BOUND_S
    while time.monotonic() < deadline:
        try:
            if coordinator.placement(rig.shards[0].account) is not None:
                break
        except Exception:  # Redis still starting
            pass
        time.sleep(0.2)
    return time.time()


def redis_wipe(options: Options, root: Path, say: Say) -> RunReport:
    config = RigConfig(listen=not options.direct, defaults=True, redis_persistent=False)
    marks: dict[str, float] = {}

    def inject(rig: Rig, workload: Workload, rng: random.Random) -> None:
        start = time.monotonic()
        window = max(options.window_s, 1.0)
        time.sleep(max(0.0, start + RESTART_AT * window - time.monotonic()))
        rig.restart_host()
        marks["fence_before"] = _wait_for_fence(rig, 2)
        time.sleep(max(0.0, start + WIPE_AT * window - time.monotonic()))
        rig.wipe_redis()
        marks["wiped_at"] = time.time()
        # The run goes on until the processes hold a grant above the fence and the directory is
        # back (bounded): a short workload may have been answered before the wipe was noticed.
        marks["fence_after_wipe"] = _wait_for_fence(rig, int(marks["fence_before"]) + 1)
        marks["directory_back_s"] = _wait_for_directory(rig) - marks["wiped_at"]

    def audit(rig: Rig, report: RunReport) -> None:
        placement = coordinator_for(rig.settings).placement(rig.shards[0].account)
        marks["fence_after"] = store_fence(rig.store)
        shown = "none" if placement is None else f"{placement.shard}, generation {placement.generation}"
        report.rows.append(("directory entry at the end", shown))
        report.checks["the directory was rebuilt"] = placement is not None

    report = run_traffic(options, config, root, say, inject, stall_s=STALL_S, audit=audit)
    before, after = int(marks.get("fence_before", 0)), int(marks.get("fence_after", 0))
    report.rows.append(("store fence: before the wipe → at the end", f"grant {before} → grant {after}"))
    if "directory_back_s" in marks:
        report.rows.append(("redis wipe → directory entry back", f"{marks['directory_back_s']:.1f} s"))
    report.checks["a grant above the fence after the wipe"] = after > before
    report.checks["the fence saw grant ≥ 2 before the wipe"] = before >= 2
    wiped_at = marks.get("wiped_at")
    last = report.audit.last_reply_at_ms if report.audit is not None else None
    recovery = None if wiped_at is None or last is None else last / 1000 - wiped_at
    report.rows.append(("redis wipe → last reply", "-" if recovery is None else f"{recovery:.1f} s"))
    report.checks[f"redis wipe → last reply ≤ {RECOVERY_BOUND_S:g} s"] = (
        recovery is not None and recovery <= RECOVERY_BOUND_S
    )
    exits = _exit_counts(report)
    report.checks[f"no exit loop (≤ {EXITS_PER_PROCESS} exits per process)"] = all(
        n <= EXITS_PER_PROCESS for n in exits.values()
    )
    report.checks["redis wiped"] = report.faults.get("redis wipes", 0) == 1
    return report


def _exit_counts(report: RunReport) -> dict[str, int]:
    """Per process, how often it exited by itself (from the report's "<n> (why ×k, …)")."""
    return {role: int(text.split(" ", 1)[0]) for role, text in report.unplanned_exits.items()}
