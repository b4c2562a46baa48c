"""The one way a page enters kefu: record it in the delivery store, then publish it.

Listeners, the DingTalk HTTP callback, the reconciler's catch-up, the demo and the benchmarks
all receive through `receive_page` (runtime.pipeline.receive), so no page lives only in the
broker. A page that is recorded but could not be published is not an error for the receiver:
it may ACK the platform, and the reconciler publishes the record again after its grace.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from celery import Celery

from runtime import pipeline
from runtime.inbox import UNCHECKED, Unchecked
from runtime.pages import InboundPage
from runtime.ports import BuyerReadReceipt
from worker.context import runtime_for
from worker.dispatch import dispatch

log = logging.getLogger(__name__)

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
