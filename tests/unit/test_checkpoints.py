"""Checkpoints (SPEC 3.10): pending counts, per-account throttling on a fake clock, a real HTTP
sink that fails then recovers (one diagnostic each way), lease rejection and resume."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from config import CheckpointSettings, ListenerSettings, SettingsError, load_settings
from runtime.accounts.listener_policy import ListenerPolicy, record_listener_state
from runtime.admission.batches import evaluate
from runtime.inbound.checkpoints import SinkOutcome, compute_report, due_report, record_outcome, resume_checkpoint
from runtime.inbound.ingest import ingest_page
from runtime.inbound.input_pause import pause_input, resume_input
from runtime.outbox.manual import ManualSend, send_manual
from tests.log_capture import captured
from worker.checkpoint_sinks import HttpSink, LogSink, report_checkpoints

INTERVAL = 10_000
SECRET_TEXT = "我的手机号是13800000000"


@pytest.fixture
def busy_shop(store, shop, transport, platform) -> None:
    """Customer b1: admitted (a batch whose turn has not run); b2: input waiting; one manual send pending."""
    b1 = ingest_page(store, transport.page_of(shop, [platform.buyer_says(shop, "b1", "张三", SECRET_TEXT)]))
    evaluate(store, b1.customer_ids[0], 1000)
    b2 = ingest_page(store, transport.page_of(shop, [platform.buyer_says(shop, "b2", "李四", "在吗")]))
    send_manual(store, ManualSend(request_id="m1", customer_id=b2.customer_ids[0], text="稍等"))


def test_pending_counts_and_throttling_on_a_fake_clock(store, busy_shop):
    report = due_report(store, "shop", INTERVAL, now=1_000)
    assert (report.pending.input, report.pending.outbox, report.pending.turns) == (2, 1, 1)
    assert report.pending_count == 4 and report.reception == "stopped" and report.cursors == {"simulator": "2"}
    assert due_report(store, "shop", INTERVAL, now=1_000 + INTERVAL - 1) is None  # throttled
    assert due_report(store, "shop", INTERVAL, now=1_000 + INTERVAL) is not None


def test_reception_follows_the_listener_and_the_input_pause(store, shop, transport, platform):
    def reception() -> str:
        with store.read() as conn:
            return compute_report(conn, shop, generation=1).reception

    def listener(state: str) -> None:
        with store.write() as conn:
            record_listener_state(conn, shop, ListenerPolicy(ListenerSettings(), state=state))

    assert reception() == "stopped"  # no listener: history sync alone is not running
    listener("running")
    assert reception() == "running"
    pause_input(store, shop)
    assert reception() == "paused"  # nothing in flight
    resume_input(store, shop)
    evaluate(
        store,
        ingest_page(store, transport.page_of(shop, [platform.buyer_says(shop, "b1", "张三", "在吗")])).customer_ids[0],
        1000,
    )
    pause_input(store, shop)
    assert reception() == "draining"  # an admitted batch whose turn has not ended
    resume_input(store, shop)
    listener("reconnecting")
    assert reception() == "stopped"


class ScriptedSink(BaseHTTPRequestHandler):
    statuses: list[int] = []
    bodies: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        self.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(self.statuses.pop(0))
        self.end_headers()
        self.wfile.write(b'{"detail": "secret server detail"}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def sink_server() -> Iterator[tuple[str, type[ScriptedSink]]]:
    handler = type("Handler", (ScriptedSink,), {"statuses": [], "bodies": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/checkpoints", handler
    server.shutdown()


def test_an_http_sink_failing_then_recovering_prints_one_line_each_way(store, busy_shop, sink_server):
    url, handler = sink_server
    handler.statuses.extend([404, 404, 200, 200])
    sink = HttpSink(url, timeout_s=5)
    with captured("kefu.checkpoint") as printed:
        for tick in range(4):
            report_checkpoints(store, sink, INTERVAL, now=tick * INTERVAL)
    assert printed == [
        "checkpoint shop: KEFU_CHECKPOINT_SINK_HTTP status 404 (Not Found); local facts kept, retrying every interval",
        "checkpoint shop: reporting again",
    ]
    assert len(handler.bodies) == 4 and handler.bodies[0]["cursors"] == {"simulator": "2"}  # the sink gets them
    assert not any(secret in line for line in printed for secret in (SECRET_TEXT, "secret server detail", '"2"'))


def test_an_unreachable_sink_is_a_failure_class_of_its_own(store, shop):
    with captured("kefu.checkpoint") as printed:
        report_checkpoints(store, HttpSink("http://127.0.0.1:9/nothing", timeout_s=1), INTERVAL, now=0)
    assert printed == [
        "checkpoint shop: KEFU_CHECKPOINT_SINK_UNREACHABLE status None (ConnectError); local facts kept, "
        "retrying every interval"
    ]


def test_the_log_sink_never_writes_cursors_or_message_text(store, busy_shop):
    with captured("kefu.checkpoint") as printed:
        assert report_checkpoints(store, LogSink(), INTERVAL, now=0) == []
    assert printed == [
        "checkpoint shop generation 1: pending 4 (input 2, outbox 1, turns 1), reception stopped, 1 cursor(s)"
    ]


def test_a_rejected_generation_stops_reporting_until_resumed_and_late_answers_cannot_stop_the_new_one(
    store, shop, sink_server
):
    url, handler = sink_server
    handler.statuses.extend([409, 200])
    sink = HttpSink(url, timeout_s=5)
    old = due_report(store, "shop", INTERVAL, now=0)
    line = record_outcome(store, old, sink.send(old))
    assert "KEFU_CHECKPOINT_LEASE_REJECTED generation 1" in line
    assert due_report(store, "shop", INTERVAL, now=10 * INTERVAL) is None  # stopped, however long we wait
    assert resume_checkpoint(store, "shop") == 2
    assert record_outcome(store, old, SinkOutcome(result="rejected", status=409)) is None  # late, about generation 1
    fresh = due_report(store, "shop", INTERVAL, now=11 * INTERVAL)
    assert fresh is not None and fresh.generation == 2
    assert record_outcome(store, fresh, sink.send(fresh)) is None


def test_the_http_sink_needs_its_url(tmp_path):
    assert CheckpointSettings(sink="http", http_url="http://sink.local/x").http_url == "http://sink.local/x"
    with pytest.raises(SettingsError, match="KEFU_CHECKPOINT"):
        load_settings(data_dir=tmp_path, checkpoint={"sink": "http"})
