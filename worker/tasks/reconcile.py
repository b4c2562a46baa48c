"""kefu.ingest.reconcile (beat): re-enqueue whatever SQLite says is pending and overdue.

It publishes received pages that are still not ingested after the grace (their broker message
was lost), catches transports up from the committed cursor (a page the platform served while
no listener ran is fetched), and prunes consumed messages of the embedded broker.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from celery import Celery, Task, shared_task

from runtime.inbox import accounts_to_catch_up, overdue_pages, prune_ingested
from runtime.ingest import committed_cursor
from runtime.reconcile import pending_work
from runtime.store import now_ms
from worker.broker import embedded_folders
from worker.context import runtime_for
from worker.receiving import publish_recorded, receive_page
from worker.tasks.options import RETRY_ON_BUSY

log = logging.getLogger(__name__)

PROCESSED_KEEP_S = 3600


def catch_up(app: Celery) -> int:
    """Receive the page after each account's committed cursor when it is overdue (a page the
    platform served while no listener ran)."""
    runtime = runtime_for(app)
    with runtime.store.read() as conn:
        accounts = accounts_to_catch_up(conn)
    overdue_before = now_ms() - int(runtime.settings.reconcile.grace_s * 1000)
    published = 0
    for account_id, platform in accounts:
        transport = runtime.transports.get(platform)
        if transport is None:
            continue
        cursor = committed_cursor(runtime.store, account_id, transport.stream_id)
        try:
            page = transport.page_after(account_id, cursor)
        except Exception as error:  # one platform being down must not stop the others' catch-up
            log.warning("catch-up of %s failed (%s)", account_id, getattr(error, "code", type(error).__name__))
            continue
        if page is None:
            continue
        oldest = min(m.occurred_at for g in page.groups for m in g.messages)
        if oldest.timestamp() * 1000 < overdue_before and receive_page(app, page, fetched_after=cursor):
            published += 1
    return published


def prune_processed(folder: Path) -> None:
    cutoff = time.time() - PROCESSED_KEEP_S
    for entry in folder.glob("*.msg"):
        if entry.stat().st_mtime < cutoff:
            entry.unlink(missing_ok=True)


@shared_task(name="kefu.ingest.reconcile", bind=True, **RETRY_ON_BUSY)
def reconcile(self: Task) -> dict[str, int]:
    runtime = runtime_for(self.app)
    settings = runtime.settings
    outbox = settings.outbox
    work = pending_work(runtime.store, settings.reconcile.grace_s, outbox.attempt_lease_s, outbox.receipt_query_limit)
    for customer_id in work.admissions:
        self.app.tasks["kefu.agent.admit"].delay(customer_id)
    for customer_id in work.turns:
        self.app.tasks["kefu.agent.run_turn"].delay(customer_id)
    for request_id in work.attempts:
        self.app.tasks["kefu.outbox.attempt"].delay(request_id)
    for request_id in work.settlements:
        self.app.tasks["kefu.outbox.settle"].delay(request_id)
    grace_ms = int(settings.reconcile.grace_s * 1000)
    recorded = overdue_pages(runtime.store, grace_ms)
    for page in recorded:  # received, and their broker message lost or still stuck
        publish_recorded(self.app, page)
    prune_ingested(runtime.store)
    pages = catch_up(self.app)
    if settings.embedded_broker:
        prune_processed(embedded_folders(settings.data_dir)["processed_folder"])
    return {
        "admissions": len(work.admissions),
        "turns": len(work.turns),
        "attempts": len(work.attempts),
        "settlements": len(work.settlements),
        "received pages": len(recorded),
        "pages": pages,
    }
