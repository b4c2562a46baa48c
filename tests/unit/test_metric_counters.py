"""Counters kept as counters (issue 43): pruning and erasure never take one down; /metrics is
token- or loopback-only; the console's process metrics; `kefu health` on the worker's beat."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr
from starlette.testclient import TestClient

from config import RetentionSettings, Settings
from runtime.admission.batches import evaluate
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.turn import run_turn
from runtime.customers.erasure import erase_customer
from runtime.customers.retention import DAY_MS, prune
from runtime.inbound.history_import import check_against_store, file_format, parse_file, run_import
from runtime.inbound.ingest import ingest_page
from runtime.outbox.manual import ManualSend, send_manual
from runtime.outbox.requests import begin_attempt, record_failure, record_sent
from runtime.ports import SendFailure
from runtime.store import now_ms
from worker.console.metrics import registry_for
from worker.health import heartbeat_path

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scraped(store, settings) -> Samples:
    text = generate_latest(registry_for(store, settings)).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def counters(samples: Samples) -> Samples:
    """The samples of counters and histograms: what must never go down."""
    kinds = ("_total", "_bucket", "_count", "_sum")
    return {key: v for key, v in samples.items() if key[0].startswith("kefu_") and key[0].endswith(kinds)}


def say(store, transport, platform, buyer: str, text: str) -> int:
    said = platform.buyer_says("shop", buyer, buyer, text)
    return ingest_page(store, transport.page_of("shop", [said])).customer_ids[0]


def answered(store, settings, transport, customer: int) -> None:
    """The rules agent's automatic reply to `customer`, sent: one reply-latency observation."""
    evaluate(store, customer, 1000)
    replies: list[str] = []
    rules = RulesProvider(load_knowledge(None))
    run_turn(store, rules, customer, settings.sessions_dir, settings.zone, settings.agent, on_registered=replies.append)
    for request_id in replies:
        attempt = begin_attempt(store, request_id, "w", 60)
        record_sent(store, request_id, attempt.attempt_no, transport.send(attempt.send))


def test_retention_and_erasure_prune_rows_and_no_counter_goes_down(store, settings, shop, transport, platform):
    first = say(store, transport, platform, "b1", "什么时候发货？")
    answered(store, settings, transport, first)
    second = say(store, transport, platform, "b2", "在吗")
    answered(store, settings, transport, second)
    send_manual(store, ManualSend(request_id="op-1", customer_id=second, text="在的"))
    grant = begin_attempt(store, "op-1", "w", 60)
    record_failure(store, "op-1", grant.attempt_no, SendFailure("rejected", "BAD"))
    before = counters(scraped(store, settings))
    shard = (("shard", "default"),)
    assert before[("kefu_buyer_messages_received_total", shard)] == 2
    assert before[("kefu_reply_latency_seconds_count", shard)] == 2
    assert before[("kefu_outbox_outcomes_total", (("origin", "auto"), *shard, ("state", "sent")))] == 2
    assert before[("kefu_outbox_outcomes_total", (("origin", "manual"), *shard, ("state", "failed")))] == 1

    erase_customer(store, None, settings.sessions_dir, None, first, "alice")
    with store.read() as conn:  # the rows a recount would have read are gone
        assert conn.execute("SELECT count(*) FROM inbound_message WHERE sender_role = 'external'").scalar_one() == 1
    assert counters(scraped(store, settings)) == before

    pruned = prune(store, settings.sessions_dir, RetentionSettings(delivery_days=1), now=now_ms() + 31 * DAY_MS)
    assert pruned.messages >= 1 and pruned.replies >= 1
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM inbound_message").scalar_one() == 0
        assert conn.execute("SELECT count(*) FROM outbox_attempt").scalar_one() == 0
    assert counters(scraped(store, settings)) == before

    third = say(store, transport, platform, "b3", "什么时候发货？")  # and they go on growing from there
    answered(store, settings, transport, third)
    after = counters(scraped(store, settings))
    assert after[("kefu_buyer_messages_received_total", shard)] == 3
    assert after[("kefu_reply_latency_seconds_count", shard)] == 3
    assert all(after[key] >= value for key, value in before.items())


def test_an_imported_history_is_not_counted_as_received(store, settings, shop, transport, platform, tmp_path):
    """Earlier chats brought in (kefu import history) were received long ago, not now."""
    say(store, transport, platform, "b1", "在吗")
    line = {"conversation_id": "c9", "conversation_type": "direct", "sender_id": "b9", "role": "buyer"}
    lines = [line | {"occurred_at": f"2025-11-30T14:0{n}:00+08:00", "text": f"早先的话 {n}"} for n in range(3)]
    path = tmp_path / "h.jsonl"
    path.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n")
    parsed = parse_file(path, path.read_bytes(), file_format(path, None), shop)
    check_against_store(store, parsed)
    assert run_import(store, parsed, None, 30.0).imported == 3
    assert scraped(store, settings)[("kefu_buyer_messages_received_total", (("shard", "default"),))] == 1


def test_an_upgraded_store_starts_its_counters_where_the_recount_stood(store, settings, shop, transport, platform):
    """V31 fills the counters from the rows a store holds: the same figures its triggers keep."""
    from runtime.store.migrations import V31

    first = say(store, transport, platform, "b1", "什么时候发货？")
    answered(store, settings, transport, first)
    say(store, transport, platform, "b2", "在吗")
    send_manual(store, ManualSend(request_id="op-1", customer_id=first, text="在的"))
    grant = begin_attempt(store, "op-1", "w", 60)
    record_failure(store, "op-1", grant.attempt_no, SendFailure("rejected", "BAD"))
    counted = counters(scraped(store, settings))
    assert counted[("kefu_reply_latency_seconds_count", (("shard", "default"),))] == 1
    with store.write() as conn:  # as if V31 met these rows at the upgrade
        conn.execute("DELETE FROM metric_counter")
        for statement in V31.statements:
            if statement.lstrip().startswith("INSERT INTO metric_counter"):
                conn.execute(statement)
    assert counters(scraped(store, settings)) == counted


def test_metrics_needs_the_token_when_set_and_names_accounts_only_then(settings, store, shop):
    from worker.console import create_app
    from worker.context import WorkerRuntime

    open_settings = settings
    with TestClient(create_app(WorkerRuntime(open_settings))) as remote:
        refused = remote.get("/metrics")  # TestClient's client is no loopback address
        assert refused.status_code == 403 and "KEFU_METRICS_LOOPBACK_ONLY" in refused.text
    with TestClient(create_app(WorkerRuntime(open_settings)), client=("127.0.0.1", 50000)) as local:
        page = local.get("/metrics")
        assert page.status_code == 200
        assert "process_cpu_seconds_total" in page.text and "python_info" in page.text
        assert 'kefu_listeners{shard="default",state="stopped"} 1.0' in page.text
        assert "kefu_listener_state" not in page.text and '"shop"' not in page.text  # no account id

    guarded = Settings.model_validate(
        {**settings.model_dump(), "console": {**settings.console.model_dump(), "metrics_token": "s3cret-token"}}
    )
    assert guarded.console.metrics_token == SecretStr("s3cret-token")
    with TestClient(create_app(WorkerRuntime(guarded)), client=("127.0.0.1", 50000)) as client:
        none = client.get("/metrics")  # loopback is not enough once a token is set
        assert none.status_code == 401 and none.headers["www-authenticate"] == "Bearer"
        assert "s3cret" not in none.text
        wrong = client.get("/metrics", headers={"Authorization": "Bearer s3cret-tokem"})
        assert wrong.status_code == 401
        right = client.get("/metrics", headers={"Authorization": "Bearer s3cret-token"})
        assert right.status_code == 200 and "process_resident_memory_bytes" in right.text
        assert 'kefu_listener_state{account="shop",shard="default",state="stopped"} 1.0' in right.text


def _health(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KEFU_DATA_DIR": str(settings.data_dir), "KEFU_LANGUAGE": "en", "COLUMNS": "300"}
    kefu = os.path.join(os.path.dirname(sys.executable), "kefu")
    return subprocess.run(
        [kefu, "health", "--node", "celery@test-node", *args], env=env, capture_output=True, text=True
    )


def test_kefu_health_reads_the_workers_beat_fresh_stale_or_missing(settings):
    missing = _health(settings)
    assert missing.returncode == 2 and "KEFU_WORKER_UNHEALTHY" in missing.stdout + missing.stderr
    beat = heartbeat_path(settings.data_dir, "celery@test-node")
    beat.parent.mkdir(parents=True)
    beat.write_text(json.dumps({"pid": 1, "at": time.time()}))
    fresh = _health(settings)
    assert fresh.returncode == 0 and "healthy" in fresh.stdout, fresh.stdout + fresh.stderr
    beat.write_text(json.dumps({"pid": 1, "at": time.time() - 120}))
    stale = _health(settings, "--max-age", "30")
    assert stale.returncode == 2 and "KEFU_WORKER_UNHEALTHY" in stale.stdout + stale.stderr
    assert "Traceback" not in stale.stdout + stale.stderr
