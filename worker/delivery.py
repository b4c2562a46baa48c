"""One outbox attempt and one receipt query against a platform transport.

Shared by the outbox tasks and the operator's `kefu send` / `kefu outbox query`, so a send
from the command line goes through exactly the path a worker's send does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from runtime.leases import new_owner
from runtime.outbox import (
    SETTLED,
    AttemptSkipped,
    NeverReceived,
    SendFailure,
    begin_attempt,
    load_request,
    record_failure,
    record_sent,
    settle_by_receipt,
)
from runtime.read_checks import schedule_read_checks
from runtime.store import now_ms
from runtime.store.tables import OutboxRequest
from transports.base import ReadStatusQueries
from worker.context import WorkerRuntime

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttemptOutcome:
    # 'sent', 'not-submitted', 'rejected', 'result-unknown', or why no attempt was made
    outcome: str
    code: str | None = None
    retry_after_s: float | None = None  # the platform's throttling hint


def attempt_send(runtime: WorkerRuntime, request: OutboxRequest) -> AttemptOutcome:
    """Begin the attempt of a request read by the caller, and submit it. `begin_attempt`
    re-checks everything inside its own transaction; the read here only picks the transport."""
    request_id = request.request_id
    if request.state in SETTLED:  # e.g. refused before any platform call: no transport needed
        return AttemptOutcome("settled", request.error_code)
    # Resolve the transport before an attempt exists: a missing one must not strand an attempt.
    transport = runtime.transport_of(request.account_id)
    grant = begin_attempt(runtime.store, request_id, new_owner(), runtime.settings.outbox.attempt_lease_s)
    if isinstance(grant, AttemptSkipped):
        return AttemptOutcome(grant.reason)
    try:
        receipt = transport.send(grant.send)
    except SendFailure as failure:
        record_failure(runtime.store, request_id, grant.attempt_no, failure)
        log.warning("send %s failed: %s %s", request_id, failure.kind, failure.code)
        kind = "result-unknown" if failure.kind == "unknown" else failure.kind
        return AttemptOutcome(kind, failure.code, failure.retry_after_s)
    except Exception as error:  # the call may or may not have reached the platform
        code = type(error).__name__
        record_failure(runtime.store, request_id, grant.attempt_no, SendFailure("unknown", code))
        log.warning("send %s outcome unknown: %s", request_id, code)
        return AttemptOutcome("result-unknown", code)
    record_sent(runtime.store, request_id, grant.attempt_no, receipt)
    if isinstance(transport, ReadStatusQueries) and grant.send.recipient_id:
        checks, interval_ms = transport.read_status_schedule
        schedule_read_checks(runtime.store, request_id, checks, interval_ms, now_ms())
    return AttemptOutcome("sent")


def query_receipt(runtime: WorkerRuntime, request_id: str) -> str:
    """One provider receipt query for a result-unknown request: 'settled' (delivered),
    'never-received' (pending again: the caller attempts it anew), 'still-unknown' or
    'not-unknown'. Never re-submits what may have arrived; an operator confirms or retries
    what stays unknown."""
    with runtime.store.read() as conn:
        request = load_request(conn, request_id)
    if request is None or request.state != "result-unknown":
        return "not-unknown"
    lookup = runtime.transport_of(request.account_id).query_send(request.account_id, request_id)
    if settle_by_receipt(runtime.store, request_id, lookup, runtime.settings.outbox.attempt_lease_s):
        return "never-received" if isinstance(lookup, NeverReceived) else "settled"
    return "still-unknown" if lookup is None else "not-unknown"
