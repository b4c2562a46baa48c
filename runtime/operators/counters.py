"""Counters that only ever grow, kept in the delivery store (`metric_counter`).

Prometheus takes a counter that goes down for a restart, so a counter must never be recounted
from rows that retention or erasure prune. Buyer messages, outbox outcomes and reply latency
are counted by the store's own triggers (migration V31) in the transaction of the event; a
worker adds its task runs here. One source of truth per shard: any process reading the store
reports the same figures, and they survive restarts (a restore from a backup takes them back
to the backup's, which Prometheus reads as a reset)."""

from __future__ import annotations

from collections.abc import Iterable

from runtime.store import DeliveryStore, queries

LABEL_SEPARATOR = "\t"


def read_counters(store: DeliveryStore) -> dict[tuple[str, tuple[str, ...]], float]:
    """Every counter: (name, label values) -> value."""
    with store.read() as conn:
        rows = conn.execute(queries.metric_counter.ALL).all()
    return {
        (str(name), tuple(str(labels).split(LABEL_SEPARATOR)) if labels else ()): float(v) for name, labels, v in rows
    }


def add_counts(store: DeliveryStore, counts: Iterable[tuple[str, tuple[str, ...], float]]) -> None:
    """Add each (name, label values, amount) in one transaction."""
    params = [{"n": name, "l": LABEL_SEPARATOR.join(labels), "v": value} for name, labels, value in counts]
    if not params:
        return
    with store.write() as conn:
        conn.executemany(queries.metric_counter.ADD, params)
