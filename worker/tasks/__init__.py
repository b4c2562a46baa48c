"""Task families. Every task is idempotent and re-derivable from SQLite."""

from worker.tasks import admission, agent, ingest, outbox, reconcile

__all__ = ["admission", "agent", "ingest", "outbox", "reconcile"]
