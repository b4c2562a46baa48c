"""kefu.ingest.ping: a no-op round trip through the ingest queue (health checks, benchmarks)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="kefu.ingest.ping", ignore_result=False)
def ping() -> str:
    return "pong"
