"""`/metrics` in Prometheus' text format.

Counters are kept as counters: read from the store's `metric_counter` rows (runtime.operators.
counters), which the event's own transaction adds to and nothing prunes, so a scrape never sees
one go down when retention or erasure removes rows. Gauges (what waits now) are read from the
store at each scrape. Any process reading the shard's store reports the same figures; the
console's own process adds its `process_*` and `python_*` metrics.

Who may scrape: with `KEFU_CONSOLE__METRICS_TOKEN` a scrape must carry it as a bearer token (and
listener states name their account); without one, loopback clients only, and no account named."""

from __future__ import annotations

import ipaddress
import secrets
from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector, CollectorRegistry
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from config import Settings
from runtime.operators.alerts import backlog
from runtime.operators.counters import read_counters
from runtime.operators.status import MODEL_WINDOW_S, REPLY_LATENCY_BOUNDS, operations
from runtime.store import DeliveryStore
from runtime.store.states import OutboxState
from worker.broker import queue_depths
from worker.queues import FAMILIES, queue_name


class StoreCollector(Collector):
    def __init__(self, store: DeliveryStore, settings: Settings) -> None:
        self.store, self.settings, self.shard = store, settings, settings.shard
        self.name_accounts = settings.console.metrics_token is not None

    def collect(self) -> Iterator[Metric]:
        yield from self._counters()
        now = operations(self.store)
        shard = [self.shard]
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
        listeners = GaugeMetricFamily("kefu_listeners", "Accounts in each listener state", labels=["shard", "state"])
        for state in sorted(set(now.listeners.values())):
            listeners.add_metric([self.shard, state], sum(1 for s in now.listeners.values() if s == state))
        yield listeners
        if self.name_accounts:  # account ids only to a scrape that showed the token
            each = GaugeMetricFamily(
                "kefu_listener_state",
                "1 for each account's current listener state",
                labels=["shard", "account", "state"],
            )
            for account, state in sorted(now.listeners.items()):
                each.add_metric([self.shard, account, state], 1)
            yield each
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

    def _counters(self) -> Iterator[Metric]:
        """The store's counters (runtime.operators.counters): they only ever grow."""
        counted = read_counters(self.store)
        shard = [self.shard]

        def of(name: str) -> list[tuple[tuple[str, ...], float]]:
            return sorted((labels, value) for (n, labels), value in counted.items() if n == name)

        received = CounterMetricFamily("kefu_buyer_messages_received", "Buyer messages stored", labels=["shard"])
        received.add_metric(shard, counted.get(("buyer_messages_received", ()), 0))
        yield received
        outcomes = CounterMetricFamily(
            "kefu_outbox_outcomes",
            "Outbox requests reaching each outcome (a send settled after result-unknown counts again)",
            labels=["shard", "origin", "state"],
        )
        for labels, value in of("outbox_outcomes"):
            outcomes.add_metric([self.shard, *labels], value)
        yield outcomes
        latency = HistogramMetricFamily(
            "kefu_reply_latency_seconds",
            "From a batch's first buyer message stored to its automatic reply accepted by the platform",
            labels=["shard"],
        )
        buckets = [
            (str(bound), counted.get(("reply_latency_bucket", (str(round(bound * 1000)),)), 0))
            for bound in REPLY_LATENCY_BOUNDS
        ]
        count = counted.get(("reply_latency_count", ()), 0)
        latency.add_metric(shard, [*buckets, ("+Inf", count)], counted.get(("reply_latency_sum_ms", ()), 0) / 1000)
        yield latency
        runs = CounterMetricFamily(
            "kefu_task_runs", "Celery task runs by task and final state", labels=["shard", "task", "state"]
        )
        for labels, value in of("task_runs"):
            runs.add_metric([self.shard, *labels], value)
        yield runs
        seconds = SummaryMetricFamily("kefu_task_seconds", "Celery task run time", labels=["shard", "task"])
        for (task,), total in of("task_seconds_count"):
            seconds.add_metric([self.shard, task], int(total), counted.get(("task_seconds_sum", (task,)), 0))
        yield seconds


def registry_for(store: DeliveryStore, settings: Settings) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store, settings))
    ProcessCollector(registry=registry)  # process_*: this console's own process
    PlatformCollector(registry=registry)
    return registry


def _loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:  # not an address (a test client's name)
        return False


def scrape(request: Request, registry: CollectorRegistry, settings: Settings) -> Response:
    """The exposition, to whom the settings allow it (the module's docstring)."""
    token = settings.console.metrics_token
    if token is not None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(given.encode(), token.get_secret_value().encode()):
            return PlainTextResponse(
                "KEFU_METRICS_UNAUTHORIZED: /metrics needs its bearer token (KEFU_CONSOLE__METRICS_TOKEN)",
                401,
                headers={"WWW-Authenticate": "Bearer"},
            )
    elif not _loopback(request.client.host if request.client else None):
        return PlainTextResponse(
            "KEFU_METRICS_LOOPBACK_ONLY: without KEFU_CONSOLE__METRICS_TOKEN, /metrics answers loopback clients only",
            403,
        )
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
