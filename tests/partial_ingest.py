"""A page committed partway, as an earlier version of kefu that died mid-page left it (it
committed a page group by group, each in its own transaction, then the cursor); kefu commits a
page in one transaction now, and must still complete such a page when it is replayed."""

from __future__ import annotations

from runtime.inbound import ingest
from runtime.inbound.pages import ConversationGroup, InboundPage
from runtime.store import DeliveryStore, immediate, queries


def commit_groups(store: DeliveryStore, page: InboundPage, groups: list[ConversationGroup]) -> None:
    """Commit these groups alone, each in its own transaction, and not the page."""
    with store.raw() as db:
        for group in groups:
            with immediate(db):
                _, rows = ingest._upsert_group(db, page, group, "live", store.customer_id_base, {})
                db.executemany(queries.inbound_message.INSERT, rows)
