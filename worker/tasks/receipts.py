"""kefu.receipts: buyer read receipts reported by transports. Storing one never wakes an agent:
the customer's session sees it at its next step."""

from __future__ import annotations

import logging

from celery import Task, shared_task
from pydantic import ValidationError

from runtime.read_receipts import BuyerReadReceipt, accept_buyer_receipt
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
