"""kefu.outbox: one attempt per request; settle result-unknown sends by a provider receipt query."""

from __future__ import annotations

import logging

from celery import Task, shared_task

from runtime.accounts import load_account
from runtime.leases import new_owner
from runtime.outbox import (
    AttemptSkipped,
    SendFailure,
    begin_attempt,
    load_request,
    next_pending,
    record_failure,
    record_sent,
    settle_by_receipt,
)
from worker.context import WorkerRuntime, runtime_for
from worker.tasks.options import RETRY_ON_BUSY

log = logging.getLogger(__name__)
RETRY_BACKOFF_S = (1, 2, 5, 10, 30, 60)


def _platform(runtime: WorkerRuntime, account_id: str) -> str:
    with runtime.store.read() as conn:
        account = load_account(conn, account_id)
    return account.platform if account else "unknown"


@shared_task(name="kefu.outbox.attempt", bind=True, **{**RETRY_ON_BUSY, "max_retries": len(RETRY_BACKOFF_S)})
def attempt(self: Task, request_id: str) -> str:
    runtime = runtime_for(self.app)
    with runtime.store.read() as conn:
        request = load_request(conn, request_id)
    if request is None:
        return "unknown-request"
    outcome = _attempt_once(self, runtime, request_id, request.account_id)
    if outcome not in ("waiting-for-earlier", "in-progress"):
        # This request no longer holds the customer's queue: start the next one, in order.
        following = next_pending(runtime.store, request.customer_id)
        if following is not None and following != request_id:
            self.app.tasks["kefu.outbox.attempt"].delay(following)
    return outcome


def _attempt_once(task: Task, runtime: WorkerRuntime, request_id: str, account_id: str) -> str:
    # Resolve the transport before an attempt exists: a missing one must not strand an attempt.
    transport = runtime.transport(_platform(runtime, account_id))
    grant = begin_attempt(runtime.store, request_id, new_owner(), runtime.settings.outbox.attempt_lease_s)
    if isinstance(grant, AttemptSkipped):
        if grant.reason == "result-unknown":
            task.app.tasks["kefu.outbox.settle"].delay(request_id)
        return grant.reason
    try:
        receipt = transport.send(grant.send)
    except SendFailure as failure:
        record_failure(runtime.store, request_id, grant.attempt_no, failure)
        log.warning("send %s failed: %s %s", request_id, failure.kind, failure.code)
        if failure.kind == "not-submitted" and task.request.retries < task.max_retries:
            raise task.retry(countdown=RETRY_BACKOFF_S[task.request.retries]) from None
        return failure.kind
    except Exception as error:  # the call may or may not have reached the platform
        record_failure(runtime.store, request_id, grant.attempt_no, SendFailure("unknown", type(error).__name__))
        log.warning("send %s outcome unknown: %s", request_id, type(error).__name__)
        return "result-unknown"
    record_sent(runtime.store, request_id, grant.attempt_no, receipt)
    return "sent"


@shared_task(name="kefu.outbox.settle", bind=True, **RETRY_ON_BUSY)
def settle(self: Task, request_id: str) -> str:
    runtime = runtime_for(self.app)
    with runtime.store.read() as conn:
        request = load_request(conn, request_id)
    if request is None or request.state != "result-unknown":
        return "not-unknown"
    receipt = runtime.transport(_platform(runtime, request.account_id)).query_send(request_id)
    if receipt is None:
        return "still-unknown"  # never re-submitted automatically: an operator confirms
    return "settled" if settle_by_receipt(runtime.store, request_id, receipt) else "not-unknown"
