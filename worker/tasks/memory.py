"""kefu.memory: the memory engine's task family, on its own queue. Thin shells around
runtime.memory.jobs and runtime.memory; each is idempotent and safe to repeat."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery import Task

from config.retries import MEMORY_SESSION_BUSY
from runtime.agent.session_log import SessionLog
from runtime.memory.audit import audit as memory_audit
from runtime.memory.engine import MemoryEngine, SessionMemory
from runtime.memory.history import observed_customers
from runtime.memory.history import remember_observed as remember_observed_of
from runtime.memory.jobs import SessionJobs, archive_job, backlog, rearchive_job, scope_memory, score_scope
from runtime.memory.report import report as memory_report
from runtime.memory.selfcheck import selfcheck as memory_selfcheck
from runtime.store import now_ms
from runtime.store.leases import LeaseLost
from worker.context import WorkerRuntime, runtime_for
from worker.tasks.base import HOUSEKEEPING, kefu_task

log = logging.getLogger(__name__)


def _engine(runtime: WorkerRuntime) -> MemoryEngine | None:
    if runtime.memory is None:
        log.info("memory engine is off (KEFU_MEMORY__ENABLED=false): nothing to do")
    return runtime.memory


def _session_job(task: Task, customer_id: int, job: Callable[[SessionLog, str, SessionMemory], str]) -> str:
    runtime = runtime_for(task.app)
    engine = _engine(runtime)
    if engine is None:
        return "disabled"
    settings = runtime.settings
    jobs = SessionJobs(runtime.store, settings.sessions_dir, engine, settings.agent.turn_lease_s)
    try:
        result = jobs.run(customer_id, job)
    except LeaseLost as lost:  # a turn holds the session now; the next turn above the trigger asks again
        log.warning("memory job of customer %s stopped: %s", customer_id, lost.code)
        return "lease-lost"
    if result == "busy":
        raise task.retry(
            countdown=MEMORY_SESSION_BUSY.wait_s(task.request.retries + 1), max_retries=MEMORY_SESSION_BUSY.retries
        )
    return result


@kefu_task("kefu.memory.archive")
def archive(self: Task, customer_id: int) -> str:
    return _session_job(self, customer_id, archive_job)


@kefu_task("kefu.memory.rearchive")
def rearchive(self: Task, customer_id: int) -> str:
    return _session_job(self, customer_id, rearchive_job)


@kefu_task("kefu.memory.score")
def score(self: Task, scope: str) -> int:
    """Heuristic scores for a scope's pending and review folders."""
    engine = _engine(runtime_for(self.app))
    return score_scope(scope_memory(engine, scope)) if engine else 0


@kefu_task("kefu.memory.score_backlog", **HOUSEKEEPING)
def score_backlog(self: Task) -> int:
    """Beat: hand every scope with a due backlog to `kefu.memory.score`."""
    engine = _engine(runtime_for(self.app))
    scopes = backlog(engine) if engine else []
    for scope in scopes:
        self.app.tasks[score.name].delay(scope)
    return len(scopes)


@kefu_task("kefu.memory.remember_observed", **HOUSEKEEPING)
def remember_observed(self: Task) -> int:
    """Beat, hourly: what observing routes stored on each day that has ended, into each
    customer's memory (runtime.memory.history); the folders made."""
    runtime = runtime_for(self.app)
    engine = _engine(runtime)
    if engine is None:
        return 0
    now, lease_s = now_ms(), runtime.settings.agent.turn_lease_s
    customers = observed_customers(runtime.store, engine, now)
    return sum(remember_observed_of(runtime.store, engine, c, now, lease_s) for c in customers)


@kefu_task("kefu.memory.rebuild_index")
def rebuild_index(self: Task, scope: str | None = None) -> int:
    """Rewrite index entries from the archived texts (e.g. after a tokenizer change)."""
    engine = _engine(runtime_for(self.app))
    return engine.store.rebuild_index(scope) if engine else 0


@kefu_task("kefu.memory.report")
def report(self: Task) -> list[dict[str, Any]]:
    rows = [row.model_dump() for row in memory_report(runtime_for(self.app).settings.memory_path)]
    log.info("memory report: %d scopes, %d folders", len(rows), sum(r["folders"] for r in rows))
    return rows


@kefu_task("kefu.memory.audit", **HOUSEKEEPING)
def audit(self: Task) -> list[str]:
    """Beat, daily: what needs upkeep, logged for the operator (`kefu memory audit --apply` does it)."""
    settings = runtime_for(self.app).settings
    if not settings.memory_path.exists():
        return []
    stale_ms = int(settings.memory.heuristic_after_s * 1000)
    found = memory_audit(settings.memory_path, settings.memory_images_dir, settings.memory.max_folders, stale_ms)
    for line in found.findings():
        log.warning("memory audit: %s", line)
    return found.findings()


@kefu_task("kefu.memory.selfcheck")
def selfcheck(self: Task) -> str:
    settings = runtime_for(self.app).settings
    stale_ms = int(settings.memory.heuristic_after_s * 1000)
    checks = memory_selfcheck(settings.memory_path, settings.sessions_dir, stale_ms)
    for c in checks:
        if c.status != "PASS":
            log.log(
                logging.ERROR if c.status == "FAIL" else logging.WARNING,
                "memory selfcheck %s %s: %s",
                c.status,
                c.name,
                c.detail,
            )
    return next((status for status in ("FAIL", "WARN") if any(c.status == status for c in checks)), "PASS")
