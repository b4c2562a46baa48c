"""A page committed partway, as a process that died mid-page leaves it: runtime.ingest commits a
page group by group, then its cursor, each in its own transaction."""

from __future__ import annotations

from runtime import ingest
from runtime.pages import ConversationGroup, InboundPage
from runtime.store import DeliveryStore


def commit_groups(store: DeliveryStore, page: InboundPage, groups: list[ConversationGroup]) -> None:
    with store.raw() as db:
        for group in groups:
            ingest._commit_group(db, page, group, "live", store.customer_id_base)


def commit_cursor(store: DeliveryStore, page: InboundPage) -> None:
    with store.raw() as db:
        ingest._commit_cursor(db, page)
