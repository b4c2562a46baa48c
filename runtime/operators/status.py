"""Per-stage counts read from the delivery store (never from broker or process counters)."""

from __future__ import annotations

from pydantic import BaseModel

from runtime.customers.summaries import Source, source_param
from runtime.store import DeliveryStore, now_ms, queries


class StageCounts(BaseModel):
    stage: str
    counts: dict[str, int]


def stage_counts(store: DeliveryStore, source: Source | None = None) -> list[StageCounts]:
    """Counts of one source's rows (None: both; an operator's view shows one, SPEC 3.13)."""
    statements = {
        "received pages": queries.received_page.OUTCOME_COUNTS,
        "inbound messages": queries.inbound_message.STATE_COUNTS,
        "admission batches": queries.admission_batch.STATE_COUNTS,
        "outbox requests": queries.outbox_request.STATE_COUNTS,
        "provider streams": queries.page_receipt.COMMITTED_COUNT,
    }
    params = {"sim": source_param(source)}
    with store.read() as conn:
        return [
            StageCounts(stage=stage, counts={str(k): int(v) for k, v in conn.execute(query, params)})
            for stage, query in statements.items()
        ]


def is_quiet(store: DeliveryStore) -> bool:
    """Nothing received and not ingested, waiting for admission, claimed, in a turn, or waiting
    to be sent. (A console operator's mirrored line waits as context for the buyer's next
    message: that is quiet.)"""
    with store.read() as conn:
        return not conn.execute(queries.received_page.ANY_IN_FLIGHT).first()


# Bounds (seconds) of the page-to-reply latency histogram: from the first buyer message of a
# batch reaching the store to its automatic reply being accepted by the platform.
REPLY_LATENCY_BOUNDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


MODEL_WINDOW_S = 600  # model calls are reported over the batches finished this recently


class Operations(BaseModel):
    """What operators and monitoring want to know at a glance, read from the store alone."""

    buyer_messages: int  # ever stored (counterpart lines)
    requests: dict[tuple[str, str], int]  # (origin, state) -> outbox requests
    handoffs_waiting: int  # handoffs nobody has taken yet (status waiting)
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
    with store.read() as conn:
        buyer_messages = conn.execute(queries.inbound_message.EXTERNAL_COUNT).scalar_one()
        requests = {
            (str(origin), str(state)): int(n)
            for origin, state, n in conn.execute(queries.outbox_request.ORIGIN_STATE_COUNTS)
        }
        handoffs = conn.execute(queries.customer.WAITING_COUNT).scalar_one()
        listeners = {str(a): str(s) for a, s in conn.execute(queries.account.LISTENER_STATES)}
        latency = conn.execute(queries.outbox_request.reply_latency(REPLY_LATENCY_BOUNDS)).one()
        model = conn.execute(queries.admission_batch.MODEL_USE_SINCE, {"since": now_ms() - MODEL_WINDOW_S * 1000}).one()
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
        handoffs, unknown, failed = conn.execute(queries.customer.NOTICE_COUNTS).one()
        listeners = [str(a) for a in conn.execute(queries.account.FAILED_LISTENERS).scalars()]
    return Notices(handoffs_waiting=handoffs, sends_unknown=unknown, sends_failed=failed, listeners_failed=listeners)
