"""kefu.agent.admit: claim a batch for a customer and start its turn."""

from __future__ import annotations

from celery import Task, shared_task

from runtime.admission import evaluate
from worker.context import runtime_for
from worker.tasks.options import RETRY_ON_BUSY


@shared_task(name="kefu.agent.admit", bind=True, **RETRY_ON_BUSY)
def admit(self: Task, customer_id: int) -> str:
    runtime = runtime_for(self.app)
    decision = evaluate(runtime.store, customer_id, runtime.settings.admission.batch_size)
    if decision.batch_id is not None:
        self.app.tasks["kefu.agent.run_turn"].delay(customer_id)
    return decision.reason
