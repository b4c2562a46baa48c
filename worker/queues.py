"""kefu's queues: one per task family and shard (`kefu.<family>.<shard>`), named here so that a
command can name a queue without building the Celery app."""

from __future__ import annotations

FAMILIES = ("ingest", "agent", "outbox", "receipts", "memory", "placement")


def queue_name(family: str, shard: str) -> str:
    return f"kefu.{family}.{shard}"
