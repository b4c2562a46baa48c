"""Alert webhooks: a real Celery worker raises a handoff's alert and beat's alert task POSTs it
to a real HTTP server, again after that server failed once."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import celery.contrib.testing.tasks  # noqa: F401  (registers celery.ping for start_worker)
import pytest
from celery.contrib.testing.worker import start_worker

from config import load_settings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.routes import RouteSpec, create_route
from runtime.operators.alerts import backlog
from runtime.store import DeliveryStore
from tests.integration.helpers import wait_for
from worker.celery_app import make_app

pytestmark = pytest.mark.parametrize("broker_url", ["redis"], indirect=True)


class Webhook(ThreadingHTTPServer):
    """Answers 503 to its first `down` POSTs, then 204; keeps every POST it answered."""

    def __init__(self, down: int) -> None:
        self.down, self.posts = down, []
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/kefu-alerts"


class _Handler(BaseHTTPRequestHandler):
    server: Webhook

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status = 503 if self.server.down else 204
        self.server.down = max(self.server.down - 1, 0)
        self.server.posts.append((status, self.headers["Idempotency-Key"], body))
        self.send_response(status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    server = Webhook(down=1)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


def test_a_handoff_reaches_the_webhook_once_even_after_it_failed(tmp_path, broker_url, webhook, platform, transport):
    alerts = {"webhook_url": webhook.url, "include_simulated": True}  # the simulator's account: a try-out
    settings = load_settings(data_dir=tmp_path / "var", broker_url=broker_url, alerts=alerts)
    store = DeliveryStore(settings.delivery_path, settings.delivery)
    create_account(store, AccountSpec(id="shop", platform="simulator", identity="seller-1"))
    create_route(store, RouteSpec(id="all-direct", account_id="shop", conversation_type="direct"), op_id="op-all")
    app = make_app(settings)
    with start_worker(app, pool="solo", perform_ping_check=True, shutdown_timeout=30):
        said = platform.buyer_says("shop", "b1", "张三", "可以寄到国外吗")  # no FAQ answers it: a handoff
        app.send_task("kefu.ingest.page", args=[transport.page_of("shop", [said]).model_dump(mode="json")])
        wait_for(lambda: backlog(store).raised == 1, 30, "the handoff's alert")
        app.send_task("kefu.receipts.alerts")  # as beat does
        wait_for(lambda: len(webhook.posts) == 1, 30, "the first delivery")
        wait_for(lambda: backlog(store).last_failure is not None, 10, "the failure recorded")
        assert backlog(store).last_failure == "KEFU_ALERT_WEBHOOK_HTTP: 503 Service Unavailable"
        app.send_task("kefu.receipts.alerts")  # beat's next round
        wait_for(lambda: backlog(store).raised == 0, 30, "the alert delivered")
        app.send_task("kefu.receipts.alerts")  # nothing left: no POST
        app.send_task("kefu.ingest.ping").get(timeout=30)  # a later task ran: the round before it is done
    [(_, key, sent), (status, again, body)] = webhook.posts
    assert status == 204 and key == again == body["key"] and body == sent  # the same alert, under the same key
    with store.read() as conn:
        customer = conn.execute("SELECT id FROM customer").scalar_one()
    assert {k: body[k] for k in ("kind", "shard", "account_id", "customer_id", "code", "simulated")} == {
        "kind": "handoff",
        "shard": "default",
        "account_id": "shop",
        "customer_id": customer,
        "code": "handoff",
        "simulated": True,
    }
    assert "国外" not in json.dumps(body, ensure_ascii=False)  # ids and codes only, never what was said
    assert platform.received("shop") == []  # handed off: no automatic reply
    store.close()
