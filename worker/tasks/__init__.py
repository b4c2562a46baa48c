"""Task families: the pipeline's tasks and the memory engine's. Every task is idempotent and
re-derivable from SQLite."""

from worker.tasks import memory, pipeline

__all__ = ["memory", "pipeline"]
