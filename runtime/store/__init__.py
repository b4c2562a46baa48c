"""The delivery store: one SQLite file per shard, the system of record for every stage."""

from runtime.store.connection import Connection
from runtime.store.engine import DeliveryStore, immediate, now_ms
from runtime.store.migrations import LATEST_VERSION

__all__ = ["LATEST_VERSION", "Connection", "DeliveryStore", "immediate", "now_ms"]
