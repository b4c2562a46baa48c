"""Task families. Every task is idempotent and re-derivable from SQLite."""

from worker.tasks import admission, agent, checkpoint, health, ingest, memory, outbox, receipts, reconcile

__all__ = ["admission", "agent", "checkpoint", "health", "ingest", "memory", "outbox", "receipts", "reconcile"]
