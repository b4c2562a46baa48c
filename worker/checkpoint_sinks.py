"""Where checkpoint reports go (SPEC 3.10): the log (default) or an HTTP endpoint.

A sink answers with safe facts only (code, status, reason phrase); a response body is never
read into a diagnostic, and the log sink never writes provider cursors.
"""

from __future__ import annotations

import logging
from typing import Protocol

import httpx

from config import CheckpointSettings
from runtime.accounts.registry import account_ids
from runtime.inbound.checkpoints import CheckpointReport, SinkOutcome, due_report, record_outcome
from runtime.store import DeliveryStore

log = logging.getLogger("kefu.checkpoint")


class CheckpointSink(Protocol):
    def send(self, report: CheckpointReport) -> SinkOutcome: ...


class LogSink:
    def send(self, report: CheckpointReport) -> SinkOutcome:
        log.info(
            "checkpoint %s generation %d: pending %d (input %d, outbox %d, turns %d), reception %s, %d cursor(s)",
            report.account_id,
            report.generation,
            report.pending_count,
            report.pending.input,
            report.pending.outbox,
            report.pending.turns,
            report.reception,
            len(report.cursors),
        )
        return SinkOutcome(result="accepted")


class HttpSink:
    """POSTs the report as JSON. 2xx accepts it; 409 rejects the lease generation."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = url
        self.client = httpx.Client(timeout=timeout_s)

    def send(self, report: CheckpointReport) -> SinkOutcome:
        try:
            response = self.client.post(self.url, json=report.model_dump(mode="json"))
        except httpx.HTTPError as error:
            return SinkOutcome(result="failed", code="KEFU_CHECKPOINT_SINK_UNREACHABLE", reason=type(error).__name__)
        if response.is_success:
            return SinkOutcome(result="accepted")
        if response.status_code == 409:
            return SinkOutcome(result="rejected", status=409, reason="lease generation rejected")
        return SinkOutcome(
            result="failed",
            code="KEFU_CHECKPOINT_SINK_HTTP",
            status=response.status_code,
            reason=response.reason_phrase,
        )


def build_sink(settings: CheckpointSettings) -> CheckpointSink:
    if settings.sink == "http":
        # CheckpointSettings' validator requires http_url for sink http; mypy cannot see it.
        return HttpSink(settings.http_url, settings.http_timeout_s)  # type: ignore[arg-type]
    return LogSink()


def report_checkpoints(store: DeliveryStore, sink: CheckpointSink, interval_ms: int, now: int) -> list[str]:
    """Send every account's due report; print and return the diagnostics this round produced."""
    printed = []
    with store.read() as conn:
        accounts = account_ids(conn)
    for account_id in accounts:
        report = due_report(store, account_id, interval_ms, now)
        if report is None:
            continue
        line = record_outcome(store, report, sink.send(report))
        if line is not None:
            log.warning(line)
            printed.append(line)
    return printed
