"""The pipeline's tasks. Each one loads the process's services, runs its step
(runtime.pipeline) and dispatches the follow-ups the step returned (worker.dispatch).
Task names put each task on its family's queue: `kefu.<family>.<shard>` (celery_app)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from celery import Task

from runtime import pipeline
from runtime.customers import search_index
from runtime.customers.retention import prune
from runtime.operators.alerts import deliver_alerts
from runtime.operators.reports.facts import catch_up
from runtime.store import now_ms
from worker.broker import embedded_folders
from worker.checkpoint_sinks import report_checkpoints
from worker.context import runtime_for
from worker.dispatch import Ran, SendNotDelivered, dispatch, turn
from worker.tasks.base import HOUSEKEEPING, kefu_task

PROCESSED_KEEP_S = 3600  # the embedded broker's consumed messages, kept for inspection
# A task that sends replies fails when one was not delivered (worker.dispatch.Ran): expected,
# so the worker logs it in one line, and Flower shows the task failed.
SENDS: dict[str, Any] = {"throws": (SendNotDelivered,)}

Result = str | dict[str, object]  # the step's outcome, with the steps run inline if any (Ran.result)


def _run(task: Task, step: pipeline.Step) -> Result:
    ran = Ran()
    dispatch(task.app, step.follow_ups, ran=ran)
    return ran.result(step.outcome)


@kefu_task("kefu.ingest.page", **SENDS)
def ingest(self: Task, page: dict[str, Any]) -> Result:
    """A page, and with the rules agent (or a thread pool) the rest of its buyer message's way:
    admission, the turn, the reply's first attempt, each listed in the result."""
    services = runtime_for(self.app)
    step = pipeline.ingest(services, page)
    ran = Ran()
    dispatch(self.app, step.follow_ups, turns_here=True, ran=ran)
    for work in step.follow_ups:  # forwarded: its record here is done only once it is on its way
        if isinstance(work, pipeline.Ingest) and work.shard is not None:
            pipeline.forwarded(services, work)
    return ran.result(step.outcome)


@kefu_task("kefu.ingest.fetch_media")
def fetch_media(self: Task, message_id: int) -> Result:
    return _run(self, pipeline.fetch_media(runtime_for(self.app), message_id))


@kefu_task("kefu.agent.admit")
def admit(self: Task, customer_id: int) -> Result:
    return _run(self, pipeline.admit(runtime_for(self.app), customer_id))


@kefu_task("kefu.agent.run_turn", **SENDS)
def run_turn(self: Task, customer_id: int) -> Result:
    ran = Ran()
    step = turn(self.app, customer_id, ran)
    dispatch(self.app, step.follow_ups, ran=ran)
    return ran.result(step.outcome)


@kefu_task("kefu.ingest.rescue", **HOUSEKEEPING)
def rescue(self: Task) -> Result:
    """Beat (a few times per customer lease), and once when a worker starts: turns and sends
    whose holder died go again at once (runtime.pipeline.rescue). On the ingest queue, with the
    reconciler: a backlog of turns on the agent queue must not hold up finding a dead one."""
    return _run(self, pipeline.rescue(runtime_for(self.app)))


@kefu_task("kefu.outbox.attempt", **SENDS)
def attempt(self: Task, request_id: str, retries: int = 0) -> Result:
    step = pipeline.deliver(runtime_for(self.app), request_id, retries)
    ran = Ran()
    ran.sent(request_id, step, inline=False)
    dispatch(self.app, step.follow_ups, ran=ran)
    return ran.result(step.outcome)


@kefu_task("kefu.outbox.settle")
def settle(self: Task, request_id: str) -> Result:
    return _run(self, pipeline.settle(runtime_for(self.app), request_id))


@kefu_task("kefu.receipts.buyer_read")
def buyer_read(self: Task, receipt: dict[str, Any]) -> Result:
    return _run(self, pipeline.record_read(runtime_for(self.app), receipt))


@kefu_task("kefu.receipts.read_status", **HOUSEKEEPING)
def read_status(self: Task) -> Result:
    """Beat."""
    return _run(self, pipeline.check_reads(runtime_for(self.app)))


@kefu_task("kefu.ingest.reconcile", **HOUSEKEEPING)
def reconcile(self: Task, grace_s: float | None = None) -> Result:
    """Beat, and once with no grace when a worker starts. Also prunes the embedded broker's
    consumed messages."""
    runtime = runtime_for(self.app)
    outcome = _run(self, pipeline.reconcile(runtime, grace_s))
    if runtime.settings.embedded_broker:
        _prune_processed(embedded_folders(runtime.settings.data_dir)["processed_folder"])
    return outcome


def _prune_processed(folder: Path) -> None:
    cutoff = time.time() - PROCESSED_KEEP_S
    for entry in folder.glob("*.msg"):
        if entry.stat().st_mtime < cutoff:
            entry.unlink(missing_ok=True)


@kefu_task("kefu.receipts.checkpoint", **HOUSEKEEPING)
def checkpoint(self: Task) -> int:
    """Beat: report each account's checkpoint to the configured sink."""
    runtime = runtime_for(self.app)
    interval = runtime.settings.checkpoint.interval_ms
    return len(report_checkpoints(runtime.store, runtime.checkpoint_sink, interval, now_ms()))


@kefu_task("kefu.receipts.alerts", **HOUSEKEEPING)
def alerts(self: Task) -> int:
    """Beat: deliver the alerts raised since the last round (runtime.operators.alerts, worker.alert_sinks)."""
    runtime = runtime_for(self.app)
    return deliver_alerts(runtime.store, runtime.alert_sink)


@kefu_task("kefu.receipts.retention", **HOUSEKEEPING)
def retention(self: Task) -> dict[str, int]:
    """Beat: bring the reports' facts and the search index up to date (runtime.operators.reports:
    what is pruned next is counted first; a report or search asked for later has little left to
    read), then prune what the retention policy no longer keeps (runtime.customers.retention;
    default: nothing)."""
    runtime = runtime_for(self.app)
    settings = runtime.settings
    catch_up(runtime.store, settings.zone)
    search_index.catch_up(runtime.store)
    return prune(
        runtime.store, settings.sessions_dir, settings.retention, memory_images_dir=settings.memory_images_dir
    ).model_dump()


@kefu_task("kefu.ingest.ping", ignore_result=False)
def ping(self: Task) -> str:
    """A no-op round trip through the ingest queue (health checks, benchmarks)."""
    return "pong"
