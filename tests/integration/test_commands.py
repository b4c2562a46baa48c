"""The commands users run: celery worker/beat/inspect/flower on the project app, and kefu."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from tests.integration.conftest import REDIS_SECOND_DB
from tests.integration.helpers import wait_for
from transports.simulator import SimulatedPlatform

BIN = Path(sys.executable).parent


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEFU_") or k == "KEFU_TEST_REDIS_URL"}
    # The words asserted here are English (kefu speaks Chinese by default).
    return {**env, "KEFU_LANGUAGE": "en", **extra}


def _spawn(args: list[str], cwd: Path, log: Path, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        args, cwd=cwd, env=_env(**env), stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True
    )


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _kefu(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "kefu"), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(COLUMNS="200", **env),
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_worker_and_beat_start_with_defaults_and_inspect_answers(tmp_path):
    worker = _spawn(
        [str(BIN / "celery"), "-A", "worker", "worker", "-P", "solo", "-l", "info"], tmp_path, tmp_path / "w.log"
    )
    beat = _spawn(
        [str(BIN / "celery"), "-A", "worker", "beat"], tmp_path, tmp_path / "b.log", KEFU_RECONCILE__INTERVAL_S="0.5"
    )
    try:
        wait_for(lambda: b"ready" in (tmp_path / "w.log").read_bytes(), 30, "the worker to be ready")
        ping = subprocess.run(
            [str(BIN / "celery"), "-A", "worker", "inspect", "ping", "-t", "5"],
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "pong" in ping.stdout, ping.stdout + ping.stderr
        # beat's reconcile ticks reach the worker through the embedded broker under ./var
        wait_for(lambda: b"kefu.ingest.reconcile" in (tmp_path / "w.log").read_bytes(), 30, "a reconcile tick")
    finally:
        _stop(beat)
        _stop(worker)
    assert (tmp_path / "var" / "delivery-default.sqlite").exists()
    assert (tmp_path / "var" / "broker" / "queue").is_dir()
    assert (tmp_path / "var" / "beat-schedule-default").exists() or list(
        (tmp_path / "var").glob("beat-schedule-default*")
    )


def test_inspect_ping_and_flower_queues_on_redis(tmp_path, redis_base_url):
    broker = f"{redis_base_url}/{REDIS_SECOND_DB}"
    port = _free_port()
    worker = _spawn(
        [str(BIN / "celery"), "-A", "worker", "worker", "-P", "solo", "-l", "info"],
        tmp_path,
        tmp_path / "w.log",
        KEFU_BROKER_URL=broker,
    )
    flower = _spawn(
        [str(BIN / "celery"), "-A", "worker", "flower", f"--port={port}", "--address=127.0.0.1"],
        tmp_path,
        tmp_path / "f.log",
        KEFU_BROKER_URL=broker,
        FLOWER_UNAUTHENTICATED_API="true",
    )
    try:
        wait_for(lambda: b"ready" in (tmp_path / "w.log").read_bytes(), 30, "the worker to be ready")
        ping = subprocess.run(
            [str(BIN / "celery"), "-A", "worker", "inspect", "ping", "-t", "5"],
            cwd=tmp_path,
            env=_env(KEFU_BROKER_URL=broker),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "pong" in ping.stdout, ping.stdout + ping.stderr
        queues: list[str] = []

        def flower_lists_queues() -> bool:
            try:
                body = httpx.get(f"http://127.0.0.1:{port}/api/queues/length", timeout=2).json()
            except httpx.HTTPError:
                return False
            queues[:] = [q["name"] for q in body.get("active_queues", [])]
            return bool(queues)

        wait_for(flower_lists_queues, 30, "flower to report queue lengths")
        assert sorted(queues) == [
            f"kefu.{f}.default" for f in ("agent", "ingest", "memory", "outbox", "placement", "receipts")
        ]
    finally:
        _stop(flower)
        _stop(worker)


def test_a_bad_setting_stops_the_worker_naming_the_variable(tmp_path):
    run = subprocess.run(
        [str(BIN / "celery"), "-A", "worker", "worker", "-P", "solo"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=_env(KEFU_DELIVERY__BUSY_TIMEOUT_MS="-5"),
        timeout=60,
    )
    assert run.returncode != 0
    assert "KEFU_DELIVERY__BUSY_TIMEOUT_MS" in run.stderr and "greater than or equal to 1" in run.stderr


def test_kefu_config_masks_secrets_and_reads_kefu_toml(tmp_path):
    (tmp_path / "kefu.toml").write_text('timezone = "Europe/Berlin"\n[admission]\nbatch_size = 50\n', encoding="utf-8")
    run = _kefu(tmp_path, "config", KEFU_AGENT__OPENAI__API_KEY="sk-do-not-print")
    assert run.returncode == 0, run.stderr
    assert "sk-do-not-print" not in run.stdout and "**********" in run.stdout
    assert "Europe/Berlin" in run.stdout and "KEFU_ADMISSION__BATCH_SIZE" in run.stdout and " 50 " in run.stdout


def test_the_demo_with_a_small_window_archives_scores_and_recalls_into_the_prompt(tmp_path):
    from runtime.agent.session_log import SessionLog
    from runtime.agent.view import model_view
    from runtime.memory.store import MemoryStore

    small = {"KEFU_AGENT__CONTEXT_WINDOW_TOKENS": "1000", "KEFU_MEMORY__ALLOW_SMALL_WINDOW": "true"}
    run = _kefu(tmp_path, "demo", **small)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().splitlines()[-1] == "demo: 16 buyer messages, 16 answered, 0 duplicate replies, 0 lost"
    demo_dir = next((tmp_path / "var").glob("demo-*"))
    shown = _kefu(tmp_path, "memory", "show", "--json", KEFU_DATA_DIR=str(demo_dir))
    assert shown.returncode == 0, shown.stderr
    memory = json.loads(shown.stdout)
    folders = [f for scope in memory.values() for f in scope["folders"]]
    assert folders and all(f["scored"] and f["score_source"] == "heuristic" for f in folders)
    # 张三's last question (about the courier) recalled his archived first turns into the prompt.
    recalled = {scope: v["recall_block"] for scope, v in memory.items() if v["recall_block"]}
    assert list(recalled) == ["customer-1"]
    log = SessionLog(demo_dir / "sessions" / "default" / "s1-1.jsonl.zst")
    log.load()
    system = model_view(log)[0].content
    store = MemoryStore(demo_dir / "memory-default.sqlite")
    texts = [store.text(i) for i in recalled["customer-1"]]
    assert any("快递" in t for t in texts) and all(t.rstrip() in system for t in texts)
    check = _kefu(tmp_path, "memory", "selfcheck", KEFU_DATA_DIR=str(demo_dir))
    assert check.returncode == 0 and "FAIL" not in check.stdout


def test_kefu_config_rejects_a_bad_zone(tmp_path):
    run = _kefu(tmp_path, "config", KEFU_TIMEZONE="Asia/Shanghia")
    assert run.returncode == 2
    assert "KEFU_TIMEZONE" in run.stderr and "IANA" in run.stderr


def test_kefu_demo_answers_every_buyer_message_once(tmp_path):
    run = _kefu(tmp_path, "demo")
    assert run.returncode == 0, run.stdout + run.stderr
    last = run.stdout.strip().splitlines()[-1]
    assert last == "demo: 16 buyer messages, 16 answered, 0 duplicate replies, 0 lost"
    demo_only = {"KEFU_DATA_DIR": str(next((tmp_path / "var").glob("demo-*")))}
    status = _kefu(tmp_path, "status", "--source", "simulation", **demo_only)
    assert status.returncode == 0 and "outbox requests" in status.stdout and "sent" in status.stdout
    real = _kefu(tmp_path, "status", **demo_only).stdout  # the demo's rows are simulated: never counted as real
    assert "sent" not in real and "kefu status --source simulation" in real

    # The operator commands, against the demo's data dir.
    demo_dir = {"KEFU_DATA_DIR": str(next((tmp_path / "var").glob("demo-*")))}
    listed = json.loads(_kefu(tmp_path, "customers", "--source", "simulation", "--json", **demo_dir).stdout)
    assert sorted(c["conversation_id"] for c in listed) == [
        "sim-direct-b1", "sim-direct-b2", "sim-direct-b3", "sim-group-g1"
    ]  # fmt: skip
    assert json.loads(_kefu(tmp_path, "customers", "--json", **demo_dir).stdout) == []  # no real customers
    assert json.loads(_kefu(tmp_path, "outbox", "--state", "sent", "--json", **demo_dir).stdout) == []
    sent = json.loads(
        _kefu(tmp_path, "outbox", "--state", "sent", "--source", "simulation", "--json", **demo_dir).stdout
    )
    # One reply per round of the script at least (back-to-back messages may share one reply).
    assert len(sent) >= 10 and {r["state"] for r in sent} == {"sent"}
    paused = _kefu(tmp_path, "pause", str(listed[0]["id"]), "--reason", "人工接待", **demo_dir)
    assert paused.returncode == 0 and "paused (epoch 1" in paused.stdout
    assert "handled automatically" in _kefu(tmp_path, "resume", str(listed[0]["id"]), **demo_dir).stdout
    b1 = next(c["id"] for c in listed if c["conversation_id"] == "sim-direct-b1")
    # The shop's replies are in the history with their fate, and the agent's notes for operators.
    lines = _kefu(tmp_path, "history", str(b1), "--limit", "2", **demo_dir).stdout.splitlines()
    assert any("] agent " in line and line.endswith("· sent") for line in lines), lines  # English: the suite's
    assert not any("im_send_message" in line for line in lines), lines  # a send is its reply line, no note
    assert any(line.endswith("secondary notes of the agent hidden: --notes shows them)") for line in lines), lines
    assert "time: Asia/Shanghai (UTC+08:00), the simulated conversation's script time" in lines, lines
    assert lines[-1].startswith(f"(older: kefu history {b1} --before ")
    cursor = lines[-1].removeprefix(f"(older: kefu history {b1} --before ").removesuffix(")")
    whole = json.loads(_kefu(tmp_path, "history", str(b1), "--limit", "500", "--json", **demo_dir).stdout)
    older = json.loads(_kefu(tmp_path, "history", str(b1), "--before", cursor, "--json", **demo_dir).stdout)
    stored = [line["key"] for line in whole["lines"] if line["speaker"] != "agent-note"]
    newer = [line["key"] for line in older["lines"] if line["speaker"] != "agent-note"]
    assert stored == newer + stored[-2:] and whole["older"] is None  # the pages meet, nothing twice or lost
    assert [line["text"] for line in whole["lines"] if line["speaker"] == "buyer"][0] == "你好，在吗？"
    for args, code in [
        (("pause", "999"), "KEFU_CUSTOMER_UNKNOWN"),
        (("history", "999"), "KEFU_CUSTOMER_UNKNOWN"),
        (("outbox", "confirm", "no-such-request", "--delivered"), "KEFU_REQUEST_UNKNOWN"),
        (("outbox", "confirm", sent[0]["request_id"], "--not-delivered"), "KEFU_REQUEST_NOT_UNKNOWN"),
    ]:
        refused = _kefu(tmp_path, *args, **demo_dir)
        assert refused.returncode == 2 and code in refused.stdout, refused.stdout + refused.stderr


def test_operator_send_read_query_and_retry_against_the_demo_data_dir(tmp_path):
    assert _kefu(tmp_path, "demo").returncode == 0
    demo_dir = {"KEFU_DATA_DIR": str(next((tmp_path / "var").glob("demo-*")))}
    platform = SimulatedPlatform(Path(demo_dir["KEFU_DATA_DIR"]) / "simulator-platform.sqlite")
    listed = json.loads(_kefu(tmp_path, "customers", "--source", "simulation", "--json", **demo_dir).stdout)
    b2 = next(c for c in listed if c["conversation_id"] == "sim-direct-b2")
    assert b2["unread"] > 0
    args = ("customers", "--source", "simulation", "--account", "demo-shop", "--search", "direct-b2", "--json")
    assert [c["id"] for c in json.loads(_kefu(tmp_path, *args, **demo_dir).stdout)] == [b2["id"]]
    args = ("customers", "--source", "simulation", "--account", "other-shop", "--json")
    assert json.loads(_kefu(tmp_path, *args, **demo_dir).stdout) == []

    (tmp_path / "chart").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    send_chart = ("send", str(b2["id"]), "见尺码表", "--file", str(tmp_path / "chart"), "--request-id", "op-1")
    sent = _kefu(tmp_path, *send_chart, LOGNAME="bob", **demo_dir)
    assert sent.returncode == 0, sent.stdout + sent.stderr
    assert "request op-1.file: sent simmsg-" in sent.stdout and "request op-1: sent simmsg-" in sent.stdout
    parts = [r for r in platform.received() if r.client_ref.startswith("op-1")]
    assert [(r.kind, r.text) for r in parts] == [("image", "chart.png"), ("text", "见尺码表")]
    again = _kefu(tmp_path, *send_chart, **demo_dir)
    assert again.returncode == 0 and len([r for r in platform.received() if r.client_ref.startswith("op-1")]) == 2
    history = _kefu(tmp_path, "history", str(b2["id"]), "--limit", "2", **demo_dir).stdout
    assert "operator bob (command line) [image chart.png]  · sent" in history  # `kefu send`: the login name
    assert "operator bob (command line) 见尺码表  · sent" in history

    read = _kefu(tmp_path, "read", str(b2["id"]), **demo_dir)
    assert read.returncode == 0 and "read by operator up to message" in read.stdout
    listed = json.loads(_kefu(tmp_path, "customers", "--source", "simulation", "--json", **demo_dir).stdout)
    assert next(c for c in listed if c["id"] == b2["id"])["unread"] == 0
    other = _kefu(tmp_path, "customers", "--source", "simulation", "--reader", "lead", "--json", **demo_dir).stdout
    assert next(c for c in json.loads(other) if c["id"] == b2["id"])["unread"] > 0  # each reader has its own mark

    checkpoints = _kefu(tmp_path, "checkpoint", "--account", "demo-shop", "--source", "simulation", **demo_dir)
    # The demo's worker has stopped, and its listener with it.
    assert checkpoints.returncode == 0 and "demo-shop" in checkpoints.stdout and "stopped" in checkpoints.stdout
    assert "checkpoints" in _kefu(tmp_path, "status", **demo_dir).stdout
    paused = _kefu(tmp_path, "pause-input", "--wait", "5", **demo_dir)
    assert paused.returncode == 0 and "drained: no page or turn in flight" in paused.stdout
    conflict = _kefu(tmp_path, "pause-input", "--account", "demo-shop", **demo_dir)
    assert conflict.returncode == 2 and "KEFU_INPUT_PAUSE_CONFLICT" in conflict.stdout
    assert "0 held page(s), 0 customer(s) to admit" in _kefu(tmp_path, "resume-input", **demo_dir).stdout

    # A send that timed out before reaching the platform stays result-unknown while it could still
    # arrive (the attempt lease): the platform's "never received" does not count as an answer yet.
    lost = _kefu(
        tmp_path,
        "send",
        str(b2["id"]),
        "退款已提交",
        "--request-id",
        "op-2",
        KEFU_SIMULATOR__SEND_TIMEOUTS="before-submit",
        **demo_dir,
    )
    assert lost.returncode == 1 and "request op-2: result-unknown TimeoutError" in lost.stdout
    assert "kefu outbox retry <new id> op-2" in lost.stdout
    queried = json.loads(_kefu(tmp_path, "outbox", "query", "op-2", **demo_dir).stdout)
    assert (queried["state"], queried["receipt_queries"]) == ("result-unknown", 0)
    retried = _kefu(tmp_path, "outbox", "retry", "op-2b", "op-2", **demo_dir)
    assert retried.returncode == 0 and "request op-2b: sent" in retried.stdout
    assert [r.text for r in platform.received() if r.client_ref.startswith("op-2")] == ["退款已提交"]
    assert json.loads(_kefu(tmp_path, "outbox", "query", "op-2b", **demo_dir).stdout)["retry_of"] == "op-2"

    for args, code in [
        (("send", "999", "x"), "KEFU_CUSTOMER_UNKNOWN"),
        (("send", str(b2["id"]), "another text", "--request-id", "op-1"), "KEFU_REQUEST_ID_CONFLICT"),
        (("send", str(b2["id"]), "x", "--request-id", "bad id"), "KEFU_REQUEST_ID_INVALID"),
        (("send", str(b2["id"]), "x", "--file", str(tmp_path / "missing.png")), "KEFU_MEDIA_INVALID"),
        (("outbox", "query", "no-such-request"), "KEFU_REQUEST_UNKNOWN"),
        (("outbox", "query", "bad id"), "KEFU_REQUEST_ID_INVALID"),
        (("outbox", "retry", "op-3", "op-1"), "KEFU_RETRY_NEEDS_UNKNOWN"),
        (("outbox", "retry", "op-3", "no-such-request"), "KEFU_REQUEST_UNKNOWN"),
        (("outbox", "retry", "op-3", "op-2"), "KEFU_RETRY_EXISTS"),
        (("read", "999"), "KEFU_CUSTOMER_UNKNOWN"),
        (("checkpoint", "--account", "nope"), "KEFU_ACCOUNT_UNKNOWN"),
        (("checkpoint", "--resume", "nope"), "KEFU_ACCOUNT_UNKNOWN"),
        (("read", str(b2["id"]), "--upto", "99999"), "KEFU_WATERMARK_INVALID"),
    ]:
        refused = _kefu(tmp_path, *args, **demo_dir)
        assert refused.returncode == 2 and code in refused.stdout, (args, refused.stdout + refused.stderr)


def test_listen_refuses_a_prefork_pool_with_a_clear_error(tmp_path):
    env = {**os.environ, "KEFU_DATA_DIR": str(tmp_path / "var"), "KEFU_BROKER_URL": "embedded"}
    command = [sys.executable, "-m", "celery", "-A", "worker", "worker", "-P", "prefork", "-c", "2", "--listen"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "KEFU_LISTEN_NEEDS_SOLO_OR_THREADS" in done.stdout + done.stderr
