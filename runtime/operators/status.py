"""Per-stage counts read from the delivery store (never from broker or process counters)."""

from __future__ import annotations

from pydantic import BaseModel

from runtime.customers.summaries import Source, of_source, source_param
from runtime.inbound.classification import AGENT_INPUT_ROLES
from runtime.store import DeliveryStore, now_ms
from runtime.store.sql import sql


class StageCounts(BaseModel):
    stage: str
    counts: dict[str, int]


def stage_counts(store: DeliveryStore, source: Source | None = None) -> list[StageCounts]:
    """Counts of one source's rows (None: both; an operator's view shows one, SPEC 3.13)."""
    queries = {
        "received pages": "SELECT coalesce(outcome, 'not ingested'), count(*) FROM received_page"
        f" WHERE {of_source('account_id')} GROUP BY 1",
        "inbound messages": f"SELECT state, count(*) FROM inbound_message WHERE {of_source('account_id')}"
        " GROUP BY state",
        "admission batches": "SELECT b.state, count(*) FROM admission_batch b JOIN customer c ON c.id = b.customer_id"
        f" WHERE {of_source('c.account_id')} GROUP BY b.state",
        "outbox requests": f"SELECT state, count(*) FROM outbox_request WHERE {of_source('account_id')} GROUP BY state",
        "provider streams": f"SELECT 'committed pages', count(*) FROM page_receipt WHERE {of_source('account_id')}",
    }
    params = {"sim": source_param(source)}
    with store.read() as conn:
        return [
            StageCounts(stage=stage, counts={str(k): int(v) for k, v in conn.execute(sql(query), params)})
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
                f" AND sender_role IN {AGENT_INPUT_ROLES}"
                " UNION ALL SELECT 1 FROM admission_batch WHERE state IN ('claimed', 'committed')"
                " UNION ALL SELECT 1 FROM outbox_request WHERE state IN ('pending', 'sending') LIMIT 1"
            )
        ).first()


# Bounds (seconds) of the page-to-reply latency histogram: from the first buyer message of a
# batch reaching the store to its automatic reply being accepted by the platform.
REPLY_LATENCY_BOUNDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


MODEL_WINDOW_S = 600  # model calls are reported over the batches finished this recently


class Operations(BaseModel):
    """What operators and monitoring want to know at a glance, read from the store alone."""

    buyer_messages: int  # ever stored (counterpart lines)
    requests: dict[tuple[str, str], int]  # (origin, state) -> outbox requests
    handoffs_waiting: int  # customers whose automatic handling is paused
    listeners: dict[str, str]  # account -> listener state
    reply_latency: list[int]  # replies within each REPLY_LATENCY_BOUNDS bound (cumulative)
    reply_latency_count: int
    reply_latency_sum_s: float
    model_calls: int  # made by the turns of batches finished in the last MODEL_WINDOW_S
    model_seconds: float  # their wall time, waiting for a model slot included

    @property
    def model_call_mean_s(self) -> float | None:
        return self.model_seconds / self.model_calls if self.model_calls else None


def operations(store: DeliveryStore) -> Operations:
    bounds = ", ".join(f"sum(latency_ms <= {int(bound * 1000)})" for bound in REPLY_LATENCY_BOUNDS)
    with store.read() as conn:
        buyer_messages = conn.execute(
            sql("SELECT count(*) FROM inbound_message WHERE sender_role = 'external'")
        ).scalar_one()
        requests = {
            (str(origin), str(state)): int(n)
            for origin, state, n in conn.execute(
                sql("SELECT origin, state, count(*) FROM outbox_request GROUP BY origin, state")
            )
        }
        handoffs = conn.execute(sql("SELECT count(*) FROM customer WHERE handling_paused")).scalar_one()
        listeners = {str(a): str(s) for a, s in conn.execute(sql("SELECT id, listener_state FROM account"))}
        latency = conn.execute(
            sql(
                f"SELECT count(*), coalesce(sum(latency_ms), 0), {bounds} FROM ("
                " SELECT t.finished_at - (SELECT min(m.received_at) FROM inbound_message m"
                "  WHERE m.batch_id = r.batch_id AND m.sender_role = 'external') AS latency_ms"
                " FROM outbox_request r JOIN outbox_attempt t ON t.request_id = r.request_id AND t.state = 'sent'"
                " WHERE r.origin = 'auto' AND r.follows IS NULL)"
                " WHERE latency_ms IS NOT NULL"  # a reply to the buyer: not to an operator's message alone
            )
        ).one()
        model = conn.execute(
            sql(
                "SELECT coalesce(sum(model_calls), 0), coalesce(sum(model_ms), 0) FROM admission_batch"
                " WHERE model_calls > 0 AND updated_at >= :since"
            ),
            {"since": now_ms() - MODEL_WINDOW_S * 1000},
        ).one()
    return Operations(
        buyer_messages=buyer_messages,
        requests=requests,
        handoffs_waiting=handoffs,
        listeners=listeners,
        reply_latency=[int(n or 0) for n in latency[2:]],
        reply_latency_count=int(latency[0]),
        reply_latency_sum_s=float(latency[1]) / 1000,
        model_calls=int(model[0]),
        model_seconds=float(model[1]) / 1000,
    )


class Notices(BaseModel):
    """What needs a human now: shown on every console page."""

    handoffs_waiting: int
    sends_unknown: int
    sends_failed: int
    listeners_failed: list[str]

    @property
    def any(self) -> bool:
        return bool(self.handoffs_waiting or self.sends_unknown or self.sends_failed or self.listeners_failed)


def notices(store: DeliveryStore) -> Notices:
    with store.read() as conn:
        handoffs, unknown, failed = conn.execute(
            sql(
                "SELECT (SELECT count(*) FROM customer WHERE handling_paused),"
                " (SELECT count(*) FROM outbox_request WHERE state = 'result-unknown'),"
                " (SELECT count(*) FROM outbox_request WHERE state = 'failed')"
            )
        ).one()
        listeners = [
            str(a) for a in conn.execute(sql("SELECT id FROM account WHERE listener_state = 'failed'")).scalars()
        ]
    return Notices(handoffs_waiting=handoffs, sends_unknown=unknown, sends_failed=failed, listeners_failed=listeners)
