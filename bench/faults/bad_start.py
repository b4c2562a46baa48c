"""bad-start: a worker or beat started on bad state must exit non-zero with a KEFU_… code
before consuming anything (SPEC 4, 6; issue 13 item 5).

Each case gets a fresh data dir and its own Redis database holding one probe page on the
ingest queue. A worker that does not exit within the bound is killed, and whether it
consumed the probe is read from Redis. Cases: a store whose header was overwritten, a store
of a schema version from the future, the openai provider without endpoint settings, and an
unknown top-level variable (KEFU_BROKER_URI, a misspelled KEFU_BROKER_URL).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import redis

from bench.faults.options import Options
from bench.faults.redis_server import RedisServer
from bench.faults.report import RunReport
from bench.faults.rig import ACCOUNT, PROJECT_ROOT, Say, base_env, set_up_store
from config import load_settings
from runtime.inbound.pages import ConversationGroup, InboundMessage, InboundPage, Sender, TextContent
from worker.celery_app import make_app, queue_name
from worker.process import BeatProcess, KefuProcess, WorkerProcess

INGEST_QUEUE = queue_name("ingest", "default")


def _good_store(data_dir: Path) -> Path:
    settings = load_settings(data_dir=data_dir)
    set_up_store(settings)
    return settings.delivery_path


def overwritten_header(data_dir: Path, env: dict[str, str]) -> None:
    path = _good_store(data_dir)
    with open(path, "r+b") as handle:
        handle.write(b"\xde\xad\xbe\xef" * 8)  # the first 32 bytes: "SQLite format 3\0" and the page size
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def future_schema(data_dir: Path, env: dict[str, str]) -> None:
    path = _good_store(data_dir)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 999")


def openai_without_endpoint(data_dir: Path, env: dict[str, str]) -> None:
    _good_store(data_dir)
    env["KEFU_AGENT__PROVIDER"] = "openai"


def misspelled_broker_variable(data_dir: Path, env: dict[str, str]) -> None:
    _good_store(data_dir)
    env["KEFU_BROKER_URI"] = env.pop("KEFU_BROKER_URL")


@dataclass(frozen=True)
class Case:
    name: str
    prepare: Callable[[Path, dict[str, str]], None]  # builds the data dir, edits the env


CASES = (
    Case("store header overwritten", overwritten_header),
    Case("schema version 999", future_schema),
    Case("openai provider without endpoint", openai_without_endpoint),
    Case("unknown variable KEFU_BROKER_URI", misspelled_broker_variable),
)


def probe_page() -> InboundPage:
    message = InboundMessage(
        platform_message_id="bad-start-probe",
        sender=Sender(id="probe-buyer", display_name="probe", role="buyer"),
        content=TextContent(text="什么时候发货？"),
        occurred_at=datetime.now(tz=UTC),
        direct_peer_id="probe-buyer",
    )
    group = ConversationGroup(conversation_id="sim-direct-probe", conversation_type="direct", messages=[message])
    return InboundPage(account_id=ACCOUNT, stream_id="simulator", cursor="1", page_op_id="probe", groups=[group])


@dataclass
class Trial:
    case: Case
    kind: str  # worker | beat
    process: KefuProcess
    broker_url: str
    data_dir: Path
    exit_status: int | None = None
    exited_after_s: float | None = None

    @property
    def label(self) -> str:
        return f"{self.case.name} · {self.kind}"


def _prepare(root: Path, redis_server: RedisServer, index: int, case: Case, kind: str) -> Trial:
    data_dir = root / f"case-{index}-{kind}" / "data"
    broker_url = f"redis://127.0.0.1:{redis_server.port}/{index + 1}"
    env = base_env(data_dir, broker_url)
    case.prepare(data_dir, env)
    log = data_dir.parent / f"{kind}.log"
    process: KefuProcess
    if kind == "worker":
        redis.Redis.from_url(broker_url).flushdb()
        make_app(load_settings(data_dir=data_dir, broker_url=broker_url)).send_task(
            "kefu.ingest.page", args=[probe_page().model_dump(mode="json")]
        )
        process = WorkerProcess(env, log, beat=False, concurrency=2, clean_env=True, cwd=PROJECT_ROOT)
    else:
        process = BeatProcess(env, log, True, PROJECT_ROOT)
    return Trial(case, kind, process, broker_url, data_dir)


def _probe_left(trial: Trial) -> int:
    client = redis.Redis.from_url(trial.broker_url)
    return int(client.llen(INGEST_QUEUE)) + int(client.hlen("unacked"))


def _finding(trial: Trial, bound_s: float) -> tuple[str, bool]:
    process = trial.process
    codes = process.kefu_codes()
    said_ready = " ready." in process.output() or "beat: Starting" in process.output()
    if trial.exit_status is None:
        text = f"still running after {bound_s:g} s (killed)" + ("; it said ready" if said_ready else "")
    else:
        text = f"exit {trial.exit_status} after {trial.exited_after_s:.1f} s"
    text += f"; codes: {', '.join(codes[:3]) if codes else 'none'}"
    if trial.kind == "worker":
        if "KEFU_BROKER_URL" not in process.env:
            fell_back = (trial.data_dir / "broker").exists()
            text += "; used the embedded broker" if fell_back else ""
        else:
            text += "; probe page consumed" if _probe_left(trial) == 0 else "; probe page left queued"
    ok = trial.exit_status not in (None, 0) and bool(codes)
    return text, ok


def bad_start(options: Options, root: Path, say: Say) -> RunReport:
    began = time.monotonic()
    bound_s = options.settle_s
    report = RunReport(
        scenario="bad-start", setup=f"each case: a prefork worker ×2 and a beat, exit within {bound_s:g} s"
    )
    redis_server = RedisServer(root / "redis").start()
    trials: list[Trial] = []
    try:
        for index, (case, kind) in enumerate((c, k) for c in CASES for k in ("worker", "beat")):
            trials.append(_prepare(root, redis_server, index, case, kind))
        for trial in trials:
            trial.process.start()
        _await_exits(trials, bound_s)
        for trial in trials:
            text, ok = _finding(trial, bound_s)
            report.rows.append((trial.label, text))
            report.checks[f"{trial.label} exits non-zero with a KEFU_ code"] = ok
            say(f"{trial.label}: {text}")
        report.faults = {"bad starts": len(trials)}
    finally:
        for trial in trials:
            trial.process.stop(timeout_s=5)
        redis_server.stop()
    report.wall_s = time.monotonic() - began
    return report


def _await_exits(trials: list[Trial], bound_s: float) -> None:
    started = time.monotonic()
    while time.monotonic() - started < bound_s:
        for trial in trials:
            if trial.exit_status is None and not trial.process.running():
                trial.exit_status = trial.process.returncode()
                trial.exited_after_s = time.monotonic() - started
        if all(trial.exit_status is not None for trial in trials):
            return
        time.sleep(0.2)
