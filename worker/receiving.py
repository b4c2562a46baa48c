"""The one way a page enters kefu: record it in the delivery store, then publish it.

Listeners, the DingTalk HTTP callback, the reconciler's catch-up, the demo and the benchmarks
all publish through `receive_page`, so no page lives only in the broker (runtime.inbox). A page
that is recorded but could not be published is not an error for the receiver: it may ACK the
platform, and the reconciler publishes the record again after its grace.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from celery import Celery

from runtime.inbox import UNCHECKED, Unchecked, record_received
from runtime.pages import InboundPage
from runtime.read_receipts import BuyerReadReceipt
from worker.context import runtime_for

log = logging.getLogger(__name__)

INGEST_TASK = "kefu.ingest.page"
BUYER_READ_TASK = "kefu.receipts.buyer_read"

Publish = Callable[[InboundPage | BuyerReadReceipt], None]


def receive_page(app: Celery, page: InboundPage, fetched_after: str | None | Unchecked = UNCHECKED) -> bool:
    """Record the page, then publish it unless it was ingested already (or, for a page fetched
    after a committed cursor, the cursor moved on). Returns whether it was published now; False
    also when the broker refused it (the record is republished later)."""
    if not record_received(runtime_for(app).store, page, fetched_after):
        return False
    return publish_recorded(app, page.model_dump(mode="json"))


def publish_recorded(app: Celery, page: dict) -> bool:
    """Publish a page that is already recorded. A broker failure is logged, never raised."""
    try:
        app.send_task(INGEST_TASK, args=[page])
    except Exception as error:  # kept in SQLite: the reconciler publishes it after the grace
        log.warning("page %s recorded, not yet published (%s)", page.get("page_op_id"), type(error).__name__)
        return False
    return True


def broker_publisher(app: Celery) -> Publish:
    """What a listener or the callback server calls with each item it received: pages go
    through `receive_page`; buyer read receipts straight to the receipts queue."""

    def publish(item: InboundPage | BuyerReadReceipt) -> None:
        if isinstance(item, InboundPage):
            receive_page(app, item)
        else:
            app.send_task(BUYER_READ_TASK, args=[item.model_dump(mode="json")])

    return publish
