"""kefu.outbox: one attempt per request; settle result-unknown sends by a provider receipt query."""

from __future__ import annotations

from celery import Task, shared_task

from runtime.outbox import load_request, next_pending
from worker.context import runtime_for
from worker.delivery import attempt_send, query_receipt
from worker.tasks.options import RETRY_ON_BUSY

RETRY_BACKOFF_S = (1, 2, 5, 10, 30, 60)
MAX_THROTTLE_WAIT_S = 600


@shared_task(name="kefu.outbox.attempt", bind=True, **{**RETRY_ON_BUSY, "max_retries": len(RETRY_BACKOFF_S)})
def attempt(self: Task, request_id: str) -> str:
    runtime = runtime_for(self.app)
    with runtime.store.read() as conn:
        request = load_request(conn, request_id)
    if request is None:
        return "unknown-request"
    result = attempt_send(runtime, request)
    if result.outcome == "result-unknown":
        settle.delay(request_id)
    elif result.outcome == "not-submitted" and self.request.retries < self.max_retries:
        # Honour the platform's throttling hint, within the broker's visibility timeout.
        backoff = max(RETRY_BACKOFF_S[self.request.retries], min(result.retry_after_s or 0, MAX_THROTTLE_WAIT_S))
        raise self.retry(countdown=backoff)
    if result.outcome not in ("waiting-for-earlier", "in-progress"):
        start_next(request.customer_id, request_id)
    return result.outcome


def start_next(customer_id: int, after: str) -> None:
    """The request `after` no longer holds its customer's queue: start the next one, in order."""
    following = next_pending(runtime_for(attempt.app).store, customer_id)
    if following is not None and following != after:
        attempt.delay(following)


@shared_task(name="kefu.outbox.settle", bind=True, **RETRY_ON_BUSY)
def settle(self: Task, request_id: str) -> str:
    outcome = query_receipt(runtime_for(self.app), request_id)
    if outcome == "never-received":  # pending again: nothing was delivered, so attempt it anew
        attempt.delay(request_id)
    return outcome
