"""Per-stage counts read from the delivery store (never from broker or process counters)."""

from __future__ import annotations

from pydantic import BaseModel

from runtime.store import DeliveryStore
from runtime.store.sql import sql


class StageCounts(BaseModel):
    stage: str
    counts: dict[str, int]


def stage_counts(store: DeliveryStore) -> list[StageCounts]:
    queries = {
        "received pages": "SELECT coalesce(outcome, 'not ingested'), count(*) FROM received_page GROUP BY 1",
        "inbound messages": "SELECT state, count(*) FROM inbound_message GROUP BY state",
        "admission batches": "SELECT state, count(*) FROM admission_batch GROUP BY state",
        "outbox requests": "SELECT state, count(*) FROM outbox_request GROUP BY state",
        "provider streams": "SELECT 'committed pages', count(*) FROM page_receipt",
    }
    with store.read() as conn:
        return [
            StageCounts(stage=stage, counts={str(k): int(v) for k, v in conn.execute(sql(query))})
            for stage, query in queries.items()
        ]


def is_quiet(store: DeliveryStore) -> bool:
    """Nothing received and not ingested, waiting for admission, claimed, in a turn, or waiting
    to be sent. (A console operator's mirrored line waits as context for the buyer's next
    message: that is quiet.)"""
    with store.read() as conn:
        return not conn.execute(
            sql(
                "SELECT 1 FROM received_page WHERE ingested_at IS NULL"
                " UNION ALL SELECT 1 FROM inbound_message WHERE state = 'claimed'"
                " UNION ALL SELECT 1 FROM inbound_message WHERE state = 'pending'"
                " AND sender_role IN ('external', 'human-native')"
                " UNION ALL SELECT 1 FROM admission_batch WHERE state IN ('claimed', 'committed')"
                " UNION ALL SELECT 1 FROM outbox_request WHERE state IN ('pending', 'sending') LIMIT 1"
            )
        ).first()
