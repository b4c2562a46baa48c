"""kefu.receipts.checkpoint (beat): report each account's checkpoint to the configured sink."""

from __future__ import annotations

from celery import Task, shared_task

from runtime.store import now_ms
from worker.checkpoint_sinks import report_checkpoints
from worker.context import runtime_for
from worker.tasks.options import RETRY_ON_BUSY


@shared_task(name="kefu.receipts.checkpoint", bind=True, **RETRY_ON_BUSY)
def checkpoint(self: Task) -> int:
    runtime = runtime_for(self.app)
    interval = runtime.settings.checkpoint.interval_ms
    return len(report_checkpoints(runtime.store, runtime.checkpoint_sink, interval, now_ms()))
