"""The dispatcher: the one place where work reaches the broker.

Follow-up work a step returned (runtime.pipeline) becomes tasks. Some runs inline instead,
in the task that made it due, each a broker hop per buyer message saved without weakening
recovery (the work is on disk before it runs, and every step is idempotent and fenced):
- admission after a turn ends (after a page is ingested, it runs in the page's transaction);
- the turn of a batch admitted while ingesting a page, when the agent answers from this
  process (the rules agent: no network, a few milliseconds), or when this worker runs a thread
  pool (a network model's layout, worker.celery_app.pool_defaults): a turn waiting on the model
  holds one of hundreds of threads, not a process, and the hop to the agent queue (a publish,
  a delivery, an ack and three task events) cost more CPU than the turn's own work. A network
  model on a prefork pool keeps its turns on the agent queue, so a slow call never holds up
  ingestion there;
- the first attempt of each reply a turn registers, while the turn goes on (begun by the
  reply's registration, in its transaction: only the send and its outcome are left).
Everything else is sent to its family's queue. A send that fails raises: the work is still in
SQLite, and the reconciler finds it after its grace.

A step run inline is still seen (Flower, the worker's log): the task that ran it records it,
under the name of the task it would have been, in `Ran`, and returns the list as its result; a
reply whose send failed (rejected, of unknown outcome, or not taken and not retried) fails the
task once its work is done (`SendNotDelivered`), as a `kefu.outbox.attempt` task of its own would.

And the one way a page enters kefu, `receive_page`: listeners, the DingTalk HTTP callback,
the demo and the benchmarks record it in the delivery store, then publish it, so no page lives
only in the broker. A page that is recorded but could not be published is not an error for the
receiver: it may ACK the platform, and the reconciler publishes the record again after its grace.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from celery import Celery, Task

from runtime import pipeline
from runtime.inbound.inbox import UNCHECKED, Unchecked
from runtime.inbound.pages import InboundPage
from runtime.pipeline import Admit, Archive, Attempt, FetchMedia, FollowUp, Ingest, RecordRead, RunTurn, Settle
from runtime.ports import BuyerReadReceipt
from worker.context import runtime_for

log = logging.getLogger(__name__)

ADMIT, RUN_TURN, ATTEMPT = "kefu.agent.admit", "kefu.agent.run_turn", "kefu.outbox.attempt"
# A send's outcomes that mean the reply did not (surely) reach the buyer (runtime.pipeline.deliver).
SEND_FAILED = frozenset({"rejected", "result-unknown", "not-submitted"})


class SendNotDelivered(Exception):
    """A reply this task attempted was not delivered; the outbox has its state (and its retry or
    receipt query, if any), so this only makes the task show as failed. Expected: the worker
    logs it in one line, without a traceback (the tasks' `throws`)."""


@dataclass
class Ran:
    """The steps one task ran inline, in order: each as `<task name> <subject>: <outcome>`."""

    steps: list[list[str]] = field(default_factory=list)
    failed_sends: list[str] = field(default_factory=list)

    def begin(self, task: str, subject: str) -> list[str]:
        entry = [task, subject, "running"]
        self.steps.append(entry)
        return entry

    def sent(self, request_id: str, step: pipeline.Step, inline: bool = True) -> None:
        """A send's step: listed if it ran inline; remembered if it failed (`inline` False: the
        task's own step, a `kefu.outbox.attempt`)."""
        if inline:
            self.begin(ATTEMPT, request_id)[2] = step.outcome
        retried = any(isinstance(w, Attempt) and w.request_id == request_id for w in step.follow_ups)
        if step.outcome in SEND_FAILED and not retried:
            self.failed_sends.append(f"{request_id}: {step.outcome}")

    def result(self, outcome: str) -> str | dict[str, object]:
        """The task's result (Flower shows it): its own outcome, and the inline steps if any ran.
        Raises SendNotDelivered after a failed send."""
        steps = [f"{task} {subject}: {result}" for task, subject, result in self.steps]
        if self.failed_sends:
            raise SendNotDelivered(f"not delivered: {', '.join(self.failed_sends)} (this task: {outcome}; {steps})")
        return {"outcome": outcome, "steps": steps} if steps else outcome


def dispatch(app: Celery, follow_ups: Iterable[FollowUp], turns_here: bool = False, ran: Ran | None = None) -> None:
    """`turns_here`: the caller ingested a page; a turn its admission made due runs here when
    the agent is local (see the module). `ran` records the steps run here."""
    ran = ran if ran is not None else Ran()
    for work in follow_ups:
        if isinstance(work, Admit):
            entry = ran.begin(ADMIT, f"customer {work.customer_id}")
            step = pipeline.admit(runtime_for(app), work.customer_id)
            entry[2] = step.outcome
            dispatch(app, step.follow_ups, turns_here, ran)
        elif turns_here and isinstance(work, RunTurn) and not work.countdown_s and _turns_inline(app):
            entry = ran.begin(RUN_TURN, f"customer {work.customer_id}")
            step = turn(app, work.customer_id, ran)
            entry[2] = step.outcome
            dispatch(app, step.follow_ups, ran=ran)
        else:
            send(app, work)


def _turns_inline(app: Celery) -> bool:
    return runtime_for(app).local_agent or getattr(app, "kefu_thread_pool", False)


def turn(app: Celery, customer_id: int, ran: Ran | None = None) -> pipeline.Step:
    """The customer's turn, in this task; each reply it registers is attempted here at once
    (recorded in `ran`)."""
    services = runtime_for(app)
    ran = ran if ran is not None else Ran()

    def attempt_here(work: FollowUp) -> None:
        if not isinstance(work, Attempt):
            dispatch(app, (work,), ran=ran)
            return
        try:
            step = pipeline.deliver(services, work.request_id, work.retries, work.begun)
            ran.sent(work.request_id, step)
            dispatch(app, step.follow_ups, ran=ran)
        except Exception as error:  # the outbox queue takes it (and failing that, the reconciler)
            log.warning("attempt of %s handed to the outbox queue (%s)", work.request_id, type(error).__name__)
            ran.begin(ATTEMPT, work.request_id)[2] = f"handed to the outbox queue ({type(error).__name__})"
            send(app, work)

    return pipeline.turn(services, customer_id, attempt_here, sends_here=True)


def send(app: Celery, work: FollowUp) -> None:
    """Publish one follow-up as its task, on this app (a process may hold several). Work goes
    to this shard's queue of its family; a page forwarded to another shard to that shard's."""
    task, args, countdown = _route(work)
    queue = f"kefu.ingest.{work.shard}" if isinstance(work, Ingest) and work.shard else None
    app.tasks[task.name].apply_async(args, countdown=countdown or None, queue=queue)


def _route(work: FollowUp) -> tuple[Task, tuple[Any, ...], float]:
    """The routing table: which task does a follow-up, with which arguments."""
    from worker.tasks import memory  # the tasks dispatch in turn
    from worker.tasks import pipeline as tasks

    match work:
        case Ingest(page, _):
            return tasks.ingest, (page,), 0
        case RecordRead(receipt):
            return tasks.buyer_read, (receipt,), 0
        case Admit(customer_id):
            return tasks.admit, (customer_id,), 0
        case RunTurn(customer_id, countdown_s):
            return tasks.run_turn, (customer_id,), countdown_s
        case Attempt(request_id, countdown_s, retries):
            return tasks.attempt, (request_id, retries), countdown_s
        case Settle(request_id):
            return tasks.settle, (request_id,), 0
        case Archive(customer_id):
            return memory.archive, (customer_id,), 0
        case FetchMedia(message_id, countdown_s):
            return tasks.fetch_media, (message_id,), countdown_s
    raise TypeError(f"no task does {type(work).__name__}")


Publish = Callable[[InboundPage | BuyerReadReceipt], None]


def receive_page(app: Celery, page: InboundPage, fetched_after: str | None | Unchecked = UNCHECKED) -> bool:
    """Record the page, then publish it unless it was ingested already (or, for a page fetched
    after a committed cursor, the cursor moved on). Returns whether it was published now; False
    also when the broker refused it (the record is republished later)."""
    step = pipeline.receive(runtime_for(app), page, fetched_after)
    if not step.follow_ups:
        return False
    try:
        dispatch(app, step.follow_ups)
    except Exception as error:  # kept in SQLite: the reconciler publishes it after the grace
        log.warning("page %s recorded, not yet published (%s)", page.page_op_id, type(error).__name__)
        return False
    return True


def broker_publisher(app: Celery) -> Publish:
    """What a listener or the callback server calls with each item it received: pages go
    through `receive_page`; buyer read receipts straight to the receipts queue."""

    def publish(item: InboundPage | BuyerReadReceipt) -> None:
        if isinstance(item, InboundPage):
            receive_page(app, item)
        else:
            dispatch(app, pipeline.receive_read(item).follow_ups)

    return publish
