"""Where alerts go besides the console: the log (default) or a webhook (KEFU_ALERTS__WEBHOOK_URL).

Beat delivers the shard's undelivered alerts oldest first and stops at the first failure, so a
webhook that is down gets them again, in order, on the next round. Delivery is at least once:
a crash between the POST and its record sends that alert again, with the same `key` (also the
`Idempotency-Key` header) for the receiver to drop it. A response body is never read into a
diagnostic.
"""

from __future__ import annotations

import logging
from typing import Protocol

import httpx

from config import AlertSettings
from runtime.alerts import Alert, mark_delivered, mark_undelivered, undelivered
from runtime.store import DeliveryStore

log = logging.getLogger("kefu.alerts")


class AlertSink(Protocol):
    def send(self, shard: str, alert: Alert) -> str | None:
        """None when the alert is delivered, else why not (a code and safe facts)."""


class LogSink:
    def send(self, shard: str, alert: Alert) -> str | None:
        log.warning(
            "alert %s:%d %s account=%s customer=%s request=%s code=%s",
            shard,
            alert.id,
            alert.kind,
            alert.account_id,
            alert.customer_id,
            alert.request_id,
            alert.code,
        )
        return None


class WebhookSink:
    """POSTs each alert as JSON; any 2xx answer delivers it."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = url
        self.client = httpx.Client(timeout=timeout_s)

    def send(self, shard: str, alert: Alert) -> str | None:
        key = f"{shard}:{alert.id}"
        body = {"key": key, "shard": shard, **alert.model_dump(mode="json", exclude={"attempts"})}
        try:
            response = self.client.post(self.url, json=body, headers={"Idempotency-Key": key})
        except httpx.HTTPError as error:
            return f"KEFU_ALERT_WEBHOOK_UNREACHABLE: {type(error).__name__}"
        if response.is_success:
            return None
        return f"KEFU_ALERT_WEBHOOK_HTTP: {response.status_code} {response.reason_phrase}"


def build_alert_sink(settings: AlertSettings) -> AlertSink:
    if settings.webhook_url:
        return WebhookSink(settings.webhook_url, settings.webhook_timeout_s)
    return LogSink()


def deliver_alerts(store: DeliveryStore, sink: AlertSink, shard: str) -> int:
    """Deliver what is due, oldest first; the number delivered."""
    delivered = 0
    for alert in undelivered(store):
        failure = sink.send(shard, alert)
        if failure is not None:
            mark_undelivered(store, alert.id, failure)
            log.warning("alert %s:%d not delivered (%s); tried again next round", shard, alert.id, failure)
            break
        mark_delivered(store, alert.id)
        delivered += 1
    return delivered
