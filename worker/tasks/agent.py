"""kefu.agent.run_turn: one turn for a customer's open batch, under the customer's writer lease
(fenced and kept renewed while the turn runs: runtime.leases)."""

from __future__ import annotations

import logging

from celery import Task, shared_task

from runtime import leases
from runtime.agent.turn import run_turn as run_agent_turn
from runtime.leases import LeaseLost
from worker.context import runtime_for
from worker.tasks.admission import admit_now
from worker.tasks.options import RETRY_ON_BUSY

log = logging.getLogger(__name__)


@shared_task(name="kefu.agent.run_turn", bind=True, **RETRY_ON_BUSY)
def run_turn(self: Task, customer_id: int) -> str:
    runtime = runtime_for(self.app)
    settings = runtime.settings
    attempt = self.app.tasks["kefu.outbox.attempt"]
    with leases.held(runtime.store, f"customer:{customer_id}", settings.agent.turn_lease_s) as fence:
        if fence is None:
            return "busy"  # the holder finishes the batch and re-runs admission; a dead holder's lease expires
        try:
            result = run_agent_turn(
                runtime.store,
                runtime.provider,
                customer_id,
                settings.sessions_dir,
                settings.zone,
                settings.agent,
                on_registered=lambda request_id: attempt.delay(request_id),
                attachments=runtime.attachments,
                memory_engine=runtime.memory,
                fence=fence,
            )
        except LeaseLost as lost:  # another worker holds the customer now and carries on
            log.warning("turn of customer %s stopped: %s", customer_id, lost.code)
            return "lease-lost"
    if result is None:
        return "no-open-batch"
    if result.archive_due:
        self.app.tasks["kefu.memory.archive"].delay(customer_id)
    admit_now(self.app, customer_id)  # input that arrived during the turn
    return result.outcome
