"""The dispatcher: the one place where follow-up work (runtime.pipeline) becomes tasks.

Admission runs inline, where input lands (after a page is ingested, after a turn ends): it is
one short transaction, and a broker hop per buyer message saved. Everything else is sent to
its family's queue. A send that fails raises: the work is still in SQLite, and the reconciler
finds it after its grace.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from celery import Celery, Task

from runtime import pipeline
from runtime.pipeline import Admit, Archive, Attempt, FollowUp, Ingest, RecordRead, RunTurn, Settle
from worker.context import runtime_for


def dispatch(app: Celery, follow_ups: Iterable[FollowUp]) -> None:
    for work in follow_ups:
        if isinstance(work, Admit):
            dispatch(app, pipeline.admit(runtime_for(app), work.customer_id).follow_ups)
        else:
            send(app, work)


def send(app: Celery, work: FollowUp) -> None:
    """Publish one follow-up as its task, on this app (a process may hold several)."""
    task, args, countdown = _route(work)
    app.tasks[task.name].apply_async(args, countdown=countdown or None)


def _route(work: FollowUp) -> tuple[Task, tuple[Any, ...], float]:
    """The routing table: which task does a follow-up, with which arguments."""
    from worker.tasks import memory  # the tasks dispatch in turn
    from worker.tasks import pipeline as tasks

    match work:
        case Ingest(page):
            return tasks.ingest, (page,), 0
        case RecordRead(receipt):
            return tasks.buyer_read, (receipt,), 0
        case Admit(customer_id):
            return tasks.admit, (customer_id,), 0
        case RunTurn(customer_id):
            return tasks.run_turn, (customer_id,), 0
        case Attempt(request_id, countdown_s, retries):
            return tasks.attempt, (request_id, retries), countdown_s
        case Settle(request_id):
            return tasks.settle, (request_id,), 0
        case Archive(customer_id):
            return memory.archive, (customer_id,), 0
    raise TypeError(f"no task does {type(work).__name__}")
