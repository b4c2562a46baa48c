"""Where alerts go besides the console: the worker log (default) or a webhook
(KEFU_ALERTS__WEBHOOK_URL); runtime.operators.alerts delivers them through one of these.

A webhook gets each alert as JSON, at least once: a crash between the POST and its record sends
it again with the same `key` (also the `Idempotency-Key` header) for the receiver to drop it. A
2xx delivers it; a 4xx other than 408 or 429 refuses it for good (tried again, it would only
hold up the rest); anything else is tried again next round. Alerts of simulated accounts go to
the log unless KEFU_ALERTS__INCLUDE_SIMULATED is set. A response body is never read into a
diagnostic.
"""

from __future__ import annotations

import logging

import httpx

from config import AlertSettings
from runtime.operators.alerts import Alert, AlertSink, SinkAnswer

log = logging.getLogger("kefu.alerts")


class LogSink:
    def send(self, alert: Alert) -> SinkAnswer:
        log.warning(
            "alert %s %s%s: account %s, customer %s, request %s, code %s",
            alert.key,
            alert.kind,
            " (simulated)" if alert.simulated else "",
            alert.account_id,
            alert.customer_id,
            alert.request_id,
            alert.code,
        )
        return SinkAnswer(outcome="delivered")


class WebhookSink:
    def __init__(
        self,
        url: str,
        timeout_s: float,
        shard: str,
        include_simulated: bool,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url, self.shard, self.include_simulated = url, shard, include_simulated
        self.client = httpx.Client(timeout=timeout_s, transport=transport)
        self.log = LogSink()

    def send(self, alert: Alert) -> SinkAnswer:
        if alert.simulated and not self.include_simulated:
            return self.log.send(alert)
        body = {"shard": self.shard, **alert.model_dump(mode="json", exclude={"attempts"})}
        try:
            response = self.client.post(self.url, json=body, headers={"Idempotency-Key": alert.key})
        except httpx.HTTPError as error:
            return SinkAnswer(outcome="retry", failure=f"KEFU_ALERT_WEBHOOK_UNREACHABLE: {type(error).__name__}")
        if response.is_success:
            return SinkAnswer(outcome="delivered")
        failure = f"KEFU_ALERT_WEBHOOK_HTTP: {response.status_code} {response.reason_phrase}"
        refused = response.is_client_error and response.status_code not in (408, 429)
        if refused:
            log.warning("alert %s refused by the webhook (%s); not sent again", alert.key, failure)
        return SinkAnswer(outcome="refused" if refused else "retry", failure=failure)


def build_alert_sink(settings: AlertSettings, shard: str) -> AlertSink:
    if settings.webhook_url is None:
        return LogSink()
    url = settings.webhook_url.get_secret_value()
    return WebhookSink(url, settings.webhook_timeout_s, shard, settings.include_simulated)
