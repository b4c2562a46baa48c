"""`/metrics` in Prometheus' text format, computed from the store at each scrape (a custom
collector: no counter lives in a process that may restart, and any process reading the shard's
store reports the same figures)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from config import Settings
from runtime.operators.alerts import backlog
from runtime.operators.status import MODEL_WINDOW_S, REPLY_LATENCY_BOUNDS, operations
from runtime.store import DeliveryStore
from runtime.store.states import OutboxState
from worker.broker import queue_depths
from worker.queues import FAMILIES, queue_name


class StoreCollector(Collector):
    def __init__(self, store: DeliveryStore, settings: Settings) -> None:
        self.store, self.settings, self.shard = store, settings, settings.shard

    def collect(self) -> Iterator[Metric]:
        now = operations(self.store)
        shard = [self.shard]
        received = CounterMetricFamily("kefu_buyer_messages_received", "Buyer messages stored", labels=["shard"])
        received.add_metric(shard, now.buyer_messages)
        yield received
        requests = GaugeMetricFamily(
            "kefu_outbox_requests", "Outbox requests by origin and state", labels=["shard", "origin", "state"]
        )
        for (origin, state), count in sorted(now.requests.items()):
            requests.add_metric([self.shard, origin, state], count)
        yield requests
        by_state = {state: sum(n for (_, s), n in now.requests.items() if s == state) for state in OutboxState}
        unknown = GaugeMetricFamily(
            "kefu_sends_result_unknown", "Sends whose outcome nobody settled yet", labels=["shard"]
        )
        unknown.add_metric(shard, by_state[OutboxState.RESULT_UNKNOWN])
        yield unknown
        waiting = GaugeMetricFamily("kefu_sends_waiting", "Sends pending or on their way", labels=["shard"])
        waiting.add_metric(shard, by_state[OutboxState.PENDING] + by_state[OutboxState.SENDING])
        yield waiting
        handoffs = GaugeMetricFamily(
            "kefu_handoffs_waiting",
            "Conversations the agent handed off that no operator has taken yet",
            labels=["shard"],
        )
        handoffs.add_metric(shard, now.handoffs_waiting)
        yield handoffs
        listeners = GaugeMetricFamily(
            "kefu_listener_state", "1 for each account's current listener state", labels=["shard", "account", "state"]
        )
        for account, state in sorted(now.listeners.items()):
            listeners.add_metric([self.shard, account, state], 1)
        yield listeners
        latency = HistogramMetricFamily(
            "kefu_reply_latency_seconds",
            "From a batch's first buyer message stored to its automatic reply accepted by the platform",
            labels=["shard"],
        )
        buckets = [(str(bound), n) for bound, n in zip(REPLY_LATENCY_BOUNDS, now.reply_latency, strict=True)]
        latency.add_metric(shard, [*buckets, ("+Inf", now.reply_latency_count)], now.reply_latency_sum_s)
        yield latency
        calls = GaugeMetricFamily(
            "kefu_model_calls_recent",
            f"Model calls of the turns of batches finished in the last {MODEL_WINDOW_S // 60} minutes",
            labels=["shard"],
        )
        calls.add_metric(shard, now.model_calls)
        yield calls
        if now.model_call_mean_s is not None:
            mean = GaugeMetricFamily(
                "kefu_model_call_seconds_mean",
                "Their mean wall time, waiting for a model slot included (none without a call)",
                labels=["shard"],
            )
            mean.add_metric(shard, now.model_call_mean_s)
            yield mean
        alerts = GaugeMetricFamily(
            "kefu_alerts_undelivered", "Alerts raised and not yet delivered to their sink", labels=["shard"]
        )
        alerts.add_metric(shard, backlog(self.store).raised)
        yield alerts
        queued = GaugeMetricFamily(
            "kefu_queue_depth", "Messages waiting in each of the shard's broker queues", labels=["shard", "queue"]
        )
        names = [queue_name(family, self.shard) for family in FAMILIES]
        for queue, depth in queue_depths(self.settings, names).items():
            if depth >= 0:  # -1: a broker that cannot be asked (AMQP) or is down: no sample, not a zero
                queued.add_metric([self.shard, queue], depth)
        yield queued


def registry_for(store: DeliveryStore, settings: Settings) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store, settings))
    return registry
