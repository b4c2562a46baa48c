"""Run real kefu processes as children: `celery -A worker worker` (optionally with embedded beat
and listeners), `celery -A worker beat`, and `kefu listen`.

Each child runs in its own process group and logs to a file. Besides starting and stopping,
a child can be hit the way a crash would: SIGKILL of its main process only (`kill_main`), of
its whole group (`kill`), or of one prefork pool child (`pool_children` lists them).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from pathlib import Path

from celery import Celery

KEFU_CODE = re.compile(r"\bKEFU_[A-Z][A-Z0-9_]*\b")


def _child_pids(pid: int) -> list[int]:
    """The direct children of a process (Linux /proc; empty elsewhere or once it is gone)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    children: list[int] = []
    for task in tasks:
        try:
            children += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return sorted(set(children))


class KefuProcess(ABC):
    """One child process running `command()`, in its own process group, logging to a file.

    `clean_env` drops the KEFU_* variables of this process's own environment, so a child sees
    exactly the kefu settings it is given. `cwd` is where it runs (default: here)."""

    # A worker or beat run here logs beat's routine runs at info (KEFU_LOG_ROUTINE_TASKS, unless
    # `env` says otherwise): a test counts the housekeeping passes it waits for in the log.
    routine_logs = False

    def __init__(self, env: dict[str, str], log_path: Path, clean_env: bool = False, cwd: Path | None = None) -> None:
        inherited = {k: v for k, v in os.environ.items() if not (clean_env and k.startswith("KEFU_"))}
        self.env = {**inherited, **env}
        if self.routine_logs:
            self.env.setdefault("KEFU_LOG_ROUTINE_TASKS", "true")
        self.log_path = log_path
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    @abstractmethod
    def command(self) -> list[str]:
        """The command line this kind of process runs."""

    def start(self) -> KefuProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                env=self.env,
                cwd=self.cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def output(self) -> str:
        """What this run (since the last start) wrote to its log."""
        if not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as log:
            log.seek(self._log_offset)
            return log.read().decode("utf-8", "replace")

    def kefu_codes(self) -> list[str]:
        """The KEFU_… codes this run printed, in order of first appearance."""
        return list(dict.fromkeys(KEFU_CODE.findall(self.output())))

    def pool_children(self) -> list[int]:
        return _child_pids(self.proc.pid) if self.running() and self.proc is not None else []

    def kill_main(self) -> None:
        """SIGKILL the main process only: its children are orphaned, as after a crash of it."""
        if self.running() and self.proc is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def kill(self) -> None:
        """SIGKILL the whole process group: no shutdown, no acks, no cleanup."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # the group is already gone
            self.proc.wait()

    def stop(self, timeout_s: float = 15) -> None:
        """SIGTERM the group and wait; SIGKILL what is left after `timeout_s`."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass
            except ProcessLookupError:
                pass
        self.kill()  # orphans of an earlier kill_main, or a main that ignored SIGTERM


class WorkerProcess(KefuProcess):
    """A worker serving every queue of its shard (with `beat`, also the embedded beat; with
    `listen`, also the account listeners); `concurrency` > 1 runs a prefork pool, unless `pool`
    names one ("default": the pool kefu picks for its settings, worker.celery_app.pool_defaults)."""

    routine_logs = True

    def __init__(
        self,
        env: dict[str, str],
        log_path: Path,
        beat: bool = True,
        concurrency: int = 1,
        listen: bool = False,
        clean_env: bool = False,
        cwd: Path | None = None,
        pool: str | None = None,
    ) -> None:
        super().__init__(env, log_path, clean_env, cwd)
        self.pool = pool
        self.beat = beat
        self.listen = listen
        self.concurrency = concurrency
        self.node_name = ""

    def command(self) -> list[str]:
        data_dir = Path(self.env["KEFU_DATA_DIR"])
        if self.pool == "default":
            pool = []
        elif self.pool is not None:
            pool = ["-P", self.pool, "-c", str(self.concurrency)]
        else:
            pool = ["-P", "solo"] if self.concurrency == 1 else ["-P", "prefork", "-c", str(self.concurrency)]
        self.node_name = f"kefu-{os.getpid()}-{time.monotonic_ns()}"
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
            f"{self.node_name}@%h",
        ]
        if self.beat:
            command += ["-B", "-s", str(data_dir / "beat-schedule-child")]
        if self.listen:
            command.append("--listen")
        return command

    def start(self) -> WorkerProcess:
        super().start()
        return self

    def wait_ready(self, app: Celery, timeout_s: float = 30) -> None:
        """Until this worker answers a ping (any worker of the app, if several share a broker
        and this one's name is not among the replies yet, keeps the wait going)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}; see {self.log_path}")
            replies = app.control.ping(timeout=0.5)
            if any(name.startswith(f"{self.node_name}@") for reply in replies for name in reply):
                return
        raise TimeoutError(f"worker did not answer a ping within {timeout_s}s; see {self.log_path}")


class BeatProcess(KefuProcess):
    """`celery -A worker beat`: the reconciler and the other periodic tasks, alone."""

    routine_logs = True

    def command(self) -> list[str]:
        schedule = Path(self.env["KEFU_DATA_DIR"]) / "beat-schedule-standalone"
        return [sys.executable, "-m", "celery", "-A", "worker", "beat", "-l", "info", "-s", str(schedule)]

    def start(self) -> BeatProcess:
        super().start()
        return self


class ListenProcess(KefuProcess):
    """`kefu listen`: the platform listeners of every live account, publishing to the broker."""

    def command(self) -> list[str]:
        # The `kefu` entry point, run by this interpreter from `cwd` (never an installed copy).
        return [sys.executable, "-c", "from worker.cli import main; main()", "listen"]

    def start(self) -> ListenProcess:
        super().start()
        return self
