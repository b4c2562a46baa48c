"""Run a real `celery -A worker worker` (with embedded beat) as a child process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from celery import Celery


class WorkerProcess:
    """A worker serving every queue of its shard (with `listen`, also running the account
    listeners), in its own process group, logging to a file."""

    def __init__(
        self, env: dict[str, str], log_path: Path, beat: bool = True, concurrency: int = 1, listen: bool = False
    ) -> None:
        self.env = {**os.environ, **env}
        self.log_path = log_path
        self.beat = beat
        self.listen = listen
        self.concurrency = concurrency
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        data_dir = Path(self.env["KEFU_DATA_DIR"])
        pool = ["-P", "solo"] if self.concurrency == 1 else ["-P", "prefork", "-c", str(self.concurrency)]
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "worker",
            "worker",
            *pool,
            "-l",
            "info",
            "--without-mingle",
            "--without-gossip",
            "-n",
            f"kefu-{os.getpid()}-{time.monotonic_ns()}@%h",
        ]
        if self.beat:
            command += ["-B", "-s", str(data_dir / "beat-schedule-child")]
        if self.listen:
            command.append("--listen")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            command,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        return self

    def wait_ready(self, app: Celery, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}; see {self.log_path}")
            if app.control.ping(timeout=0.5):
                return
        raise TimeoutError(f"worker did not answer a ping within {timeout_s}s; see {self.log_path}")

    def kill(self) -> None:
        """SIGKILL the whole process group: no shutdown, no acks, no cleanup."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout_s: float = 15) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
