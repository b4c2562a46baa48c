"""Bad state stops the process: a real `celery -A worker worker` (solo and prefork, with and
without embedded beat) or `celery -A worker beat` over a store it cannot use, or with an agent
it cannot build, exits non-zero with the KEFU_ code before consuming anything; `kefu` operator
commands on such a store print the code and exit 2. Never a traceback, never "ready"."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from config import load_settings
from runtime.store import DeliveryStore
from runtime.store.migrations import LATEST_VERSION
from tests.integration.conftest import REDIS_THIRD_DB
from worker.celery_app import make_app

BIN = Path(sys.executable).parent
EXIT_WITHIN_S = 60  # a bad start must end by itself, well before this

WORKER_MODES = {
    "solo": ["-P", "solo"],
    "solo -B": ["-P", "solo", "-B"],
    "prefork": ["-P", "prefork", "-c", "2"],
    "prefork -B": ["-P", "prefork", "-c", "2", "-B"],
}


def _store(data_dir: Path) -> Path:
    """A healthy, migrated delivery store; returns its path."""
    settings = load_settings(data_dir=data_dir)
    DeliveryStore(settings.delivery_path, settings.delivery).close()
    return settings.delivery_path


def bad_header(data_dir: Path) -> dict[str, str]:
    with open(_store(data_dir), "r+b") as file:
        file.write(b"NOT A SQLITE DB!")  # the 16-byte magic string "SQLite format 3\0"
    return {}


def future_schema(data_dir: Path) -> dict[str, str]:
    with sqlite3.connect(_store(data_dir)) as db:
        db.execute(f"PRAGMA user_version = {LATEST_VERSION + 1}")
    return {}


def openai_without_endpoint(data_dir: Path) -> dict[str, str]:
    return {"KEFU_AGENT__PROVIDER": "openai"}


CASES: dict[str, tuple[Callable[[Path], dict[str, str]], str]] = {
    "bad header": (bad_header, "KEFU_DELIVERY_STORE_UNREADABLE"),
    "future schema": (future_schema, "KEFU_SCHEMA_TOO_NEW"),
    "openai without endpoint": (openai_without_endpoint, "KEFU_PROVIDER_CONFIG"),
}


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith("KEFU_") or k == "KEFU_TEST_REDIS_URL"}
    # beat's ticks logged at info, so "Sending due task" shows that beat ran (it must not)
    routine = {"KEFU_LOG_ROUTINE_TASKS": "true"}
    return {**kept, "KEFU_DATA_DIR": str(data_dir), "COLUMNS": "200", **routine, **extra}


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run to its end (bounded), stdout and stderr together, and the exit status."""
    done = subprocess.run(
        args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=EXIT_WITHIN_S, text=True
    )
    return done.returncode, done.stdout


def _celery(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "worker", *args]


def _assert_refused(returncode: int, output: str, code: str) -> None:
    assert returncode != 0, output
    assert f"kefu: {code}" in output, output
    assert "Traceback" not in output and " ready." not in output, output


def _prepared(tmp_path: Path, case: str) -> tuple[Path, dict[str, str], str]:
    make, code = CASES[case]
    data_dir = tmp_path / "var"
    return data_dir, make(data_dir), code


# Every case in the two extreme modes, and every mode for one case: the check is the same
# code path whatever the case, what differs per mode is where Celery runs it.
RUNS = sorted(
    {(case, mode) for case in CASES for mode in ("solo", "prefork -B")} | {("bad header", m) for m in WORKER_MODES}
)


@pytest.mark.parametrize(("case", "mode"), RUNS)
def test_a_worker_in_bad_state_exits_with_the_code(tmp_path, case, mode):
    data_dir, extra, code = _prepared(tmp_path, case)
    args = _celery("worker", *WORKER_MODES[mode], "-l", "info", "--without-mingle", "--without-gossip")
    if "-B" in args:
        args += ["-s", str(tmp_path / "beat-schedule")]
    returncode, output = _run(args, tmp_path, _env(data_dir, **extra))
    _assert_refused(returncode, output, code)


@pytest.mark.parametrize("case", CASES)
def test_a_worker_on_redis_in_bad_state_exits_before_taking_a_message(tmp_path, case, redis_base_url):
    broker = f"{redis_base_url}/{REDIS_THIRD_DB}"
    client = redis.Redis.from_url(broker)
    client.flushdb()
    data_dir, extra, code = _prepared(tmp_path, case)
    app = make_app(load_settings(data_dir=tmp_path / "publisher", broker_url=broker))
    app.send_task("kefu.ingest.ping", queue="kefu.ingest.default")
    app.close()
    args = _celery("worker", *WORKER_MODES["prefork -B"], "-l", "info", "-s", str(tmp_path / "beat-schedule"))
    returncode, output = _run(args, tmp_path, _env(data_dir, KEFU_BROKER_URL=broker, **extra))
    _assert_refused(returncode, output, code)
    assert client.llen("kefu.ingest.default") == 1, "the waiting message was taken"
    assert not client.hlen("unacked")


@pytest.mark.parametrize("case", CASES)
def test_beat_in_bad_state_exits_with_the_code(tmp_path, case):
    data_dir, extra, code = _prepared(tmp_path, case)
    returncode, output = _run(
        _celery("beat", "-l", "info", "-s", str(tmp_path / "beat-schedule")), tmp_path, _env(data_dir, **extra)
    )
    _assert_refused(returncode, output, code)
    assert "Sending due task" not in output, output


def test_a_misspelled_variable_stops_the_worker_naming_it(tmp_path):
    returncode, output = _run(
        _celery("worker", "-P", "solo"), tmp_path, _env(tmp_path / "var", KEFU_BROKER_URI="redis://127.0.0.1:1/0")
    )
    assert returncode == 2, output
    assert "KEFU_BROKER_URI: not a kefu setting (did you mean KEFU_BROKER_URL?)" in output, output
    assert "Traceback" not in output, output


@pytest.mark.parametrize("command", ["status", "customers"])
@pytest.mark.parametrize("case", ["bad header", "future schema"])
def test_operator_commands_on_a_bad_store_print_the_code_and_exit_2(tmp_path, case, command):
    data_dir, extra, code = _prepared(tmp_path, case)
    returncode, output = _run([str(BIN / "kefu"), command], tmp_path, _env(data_dir, **extra))
    assert returncode == 2, output
    assert f"kefu: {code}" in output and str(data_dir / "delivery-default.sqlite") in output, output
    assert "Traceback" not in output and "───" not in output, output  # no (rich) traceback


def test_operator_commands_on_a_store_damaged_past_its_header_exit_2(tmp_path):
    path = _store(tmp_path / "var")
    with open(path, "r+b") as file:
        file.seek(2 * 4096)  # past the header page: the file still opens
        file.write(os.urandom(path.stat().st_size - 2 * 4096))
    returncode, output = _run([str(BIN / "kefu"), "status"], tmp_path, _env(tmp_path / "var"))
    assert returncode == 2, output
    assert "kefu: KEFU_DELIVERY_STORE_UNREADABLE" in output and "Traceback" not in output, output
