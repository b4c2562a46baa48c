"""Admission (SPEC 3.6): claim a batch for a customer and start its turn.

It runs inline where input lands (after a page is ingested, after a turn ends), which saves a
broker hop per message; the `kefu.agent.admit` task is how the reconciler asks again.
"""

from __future__ import annotations

from celery import Celery, Task, shared_task

from runtime.admission import evaluate
from worker.context import runtime_for
from worker.tasks.options import RETRY_ON_BUSY


def admit_now(app: Celery, customer_id: int) -> str:
    runtime = runtime_for(app)
    decision = evaluate(runtime.store, customer_id, runtime.settings.admission.batch_size)
    if decision.batch_id is not None:
        app.tasks["kefu.agent.run_turn"].delay(customer_id)
    return decision.reason


@shared_task(name="kefu.agent.admit", bind=True, **RETRY_ON_BUSY)
def admit(self: Task, customer_id: int) -> str:
    return admit_now(self.app, customer_id)
