"""kefu.ingest: persist an inbound page, then run admission for each customer it touched."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, shared_task

from runtime.errors import KefuError, PageRejected
from runtime.inbox import refuse_page
from runtime.ingest import NEVER_INGESTED, ingest_page
from runtime.input_pause import InputPaused, hold_page
from runtime.pages import InboundPage, parse_page
from worker.context import WorkerRuntime, runtime_for
from worker.tasks.admission import admit_now
from worker.tasks.options import RETRY_ON_BUSY

log = logging.getLogger(__name__)


@shared_task(name="kefu.ingest.page", bind=True, **RETRY_ON_BUSY)
def ingest(self: Task, page: dict[str, Any]) -> dict[str, Any]:
    try:
        parsed = parse_page(page)
    except PageRejected as error:
        # Final: a malformed page never becomes valid by retrying. Fields only, never values.
        log.error("page rejected: %s", "; ".join(error.problems))
        _refuse(runtime_for(self.app), page, error.code)
        return {"rejected": error.problems}
    runtime = runtime_for(self.app)
    store = runtime.store
    try:
        result = ingest_page(store, parsed)
    except InputPaused:  # kept whole, published again on resume; the cursor did not move
        hold_page(store, parsed)
        return {"page": parsed.page_op_id, "held": True}
    except KefuError as error:
        if error.code not in NEVER_INGESTED:
            raise  # e.g. a store that cannot be opened: the page stays pending for the reconciler
        log.error("page %s refused: %s", parsed.page_op_id, error.code)
        refuse_page(store, parsed.account_id, parsed.stream_id, parsed.page_op_id, error.code)
        return {"page": parsed.page_op_id, "refused": error.code}
    _confirm(runtime, parsed)
    for customer_id in result.customer_ids:
        admit_now(self.app, customer_id)
    return {"page": result.page_op_id, "replayed": result.replayed, "rows": result.rows_written}


def _refuse(runtime: WorkerRuntime, page: Any, code: str) -> None:
    """A recorded page that does not validate is done for good, or it would be published again."""
    if not isinstance(page, dict):
        return
    account_id, stream_id, page_op_id = (page.get(name) for name in ("account_id", "stream_id", "page_op_id"))
    if isinstance(account_id, str) and isinstance(stream_id, str) and isinstance(page_op_id, str):
        refuse_page(runtime.store, account_id, stream_id, page_op_id, code)


def _confirm(runtime: WorkerRuntime, page: InboundPage) -> None:
    """The page is committed: tell the platform (a failure only means it is served again)."""
    try:
        runtime.transport_of(page.account_id).confirm(page.account_id, page.cursor)
    except Exception as error:
        log.warning("confirming page %s failed (%s)", page.page_op_id, getattr(error, "code", type(error).__name__))
