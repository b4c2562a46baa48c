"""kefu.receipts: buyer read receipts reported by transports. Storing one never wakes an agent:
the customer's session sees it at its next step."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from celery import Task, shared_task
from pydantic import ValidationError

from runtime.outbox import SendFailure
from runtime.read_checks import checked, due_read_checks
from runtime.read_receipts import BuyerReadReceipt, accept_buyer_receipt
from runtime.store import now_ms
from transports.base import ReadStatusQueries
from worker.context import runtime_for
from worker.tasks.options import RETRY_ON_BUSY

log = logging.getLogger(__name__)


@shared_task(name="kefu.receipts.buyer_read", bind=True, **RETRY_ON_BUSY)
def buyer_read(self: Task, receipt: dict) -> str:
    try:
        parsed = BuyerReadReceipt.model_validate(receipt)
    except ValidationError as error:  # name the fields, never their values
        fields = sorted({".".join(map(str, e["loc"])) or "receipt" for e in error.errors(include_input=False)})
        log.warning("buyer read receipt rejected: invalid %s", ", ".join(fields))
        return "invalid"
    decision = accept_buyer_receipt(runtime_for(self.app).store, parsed)
    if decision not in ("stored", "already-stored"):
        log.info("buyer read receipt refused: %s", decision)
    return decision


@shared_task(name="kefu.receipts.read_status", bind=True, **RETRY_ON_BUSY)
def read_status(self: Task) -> dict[str, int]:
    """Beat: the read-status checks that are due (each message has a bounded schedule)."""
    runtime = runtime_for(self.app)
    store, now = runtime.store, now_ms()
    reads = 0
    for check in due_read_checks(store, now):
        transport = runtime.transport_of(check.account_id)
        if not isinstance(transport, ReadStatusQueries):
            checked(store, check.request_id, True, 0, now)
            continue
        try:
            readers = transport.read_by(check.account_id, check.platform_message_id)
        except SendFailure as failure:  # counts as a check: the schedule stays bounded
            log.info("read status of %s not available: %s", check.request_id, failure.code)
            readers = {}
        read_at = readers.get(check.recipient_id)
        if read_at is not None:
            receipt = BuyerReadReceipt(
                account_id=check.account_id,
                conversation_id=check.conversation_id,
                platform_message_id=check.platform_message_id,
                reader_id=check.recipient_id,
                read_at=datetime.fromtimestamp((read_at or now) / 1000, tz=UTC),
            )
            reads += accept_buyer_receipt(store, receipt) == "stored"
        checked(store, check.request_id, read_at is not None, transport.read_status_schedule[1], now)
    return {"reads": reads}
