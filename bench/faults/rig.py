"""The system under test of one fault run, all real processes: a private Redis, two prefork
workers, one beat and (unless publishing directly) `kefu listen`, on a fresh data dir with a
simulator account and an enabled direct route.

With two shards (`RigConfig.shards`), each shard has all of that but Redis: its own data dir,
account, KEFU_SHARD and KEFU_INSTANCE, and every process of both shards shares the one Redis
and one simulated platform file. Roles are then named after the shard (`a/worker-1`).

A supervisor thread restarts any process that exited, the way a compose restart policy would:
a planned kill is restarted after its pause, anything else (kombu can make a worker exit when
Redis restarts with unacked messages) after a second, and counted.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from celery import Celery

from bench.faults.redis_server import RedisServer
from config import Settings, load_settings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.routes import RouteSpec, create_route
from runtime.store import DeliveryStore
from transports.simulator import SimulatedPlatform
from worker.celery_app import make_app
from worker.context import runtime_for
from worker.process import BeatProcess, KefuProcess, ListenProcess, WorkerProcess

ACCOUNT = "faults-shop"
SHARD_NAMES = ("a", "b")  # of a rig with two shards (one shard: the default shard, as ever)
PROJECT_ROOT = Path(__file__).resolve().parents[2]
UNPLANNED_RESTART_S = 1.0
TICK_S = 0.2

Say = Callable[[str], None]


def set_up_store(settings: Settings, account: str = ACCOUNT) -> None:
    """The run's shop: a simulator account with an enabled direct route."""
    store = DeliveryStore(settings.delivery_path, settings.delivery)
    create_account(store, AccountSpec(id=account, platform="simulator", identity=f"{account}-seller"))
    create_route(store, RouteSpec(id=f"{account}-direct", account_id=account, conversation_type="direct"), "faults-r")
    store.close()


def base_env(data_dir: Path, broker_url: str) -> dict[str, str]:
    """Settings of every process: fast reconciling, short leases, quick listener supervision.
    One model call (timeout × attempts) stays inside the turn lease and one platform send
    inside the attempt lease (the DingTalk and Wangwang timeouts count though unused here)."""
    return {
        "KEFU_LISTENER__LEASE_S": "3",  # a killed `kefu listen`'s accounts are listened to again soon
        "KEFU_DATA_DIR": str(data_dir),
        "KEFU_BROKER_URL": broker_url,
        "KEFU_RECONCILE__INTERVAL_S": "1",
        "KEFU_RECONCILE__GRACE_S": "3",
        "KEFU_OUTBOX__ATTEMPT_LEASE_S": "5",
        "KEFU_AGENT__TURN_LEASE_S": "5",
        "KEFU_AGENT__OPENAI__TIMEOUT_S": "1",
        "KEFU_AGENT__OPENAI__MAX_ATTEMPTS": "1",
        "KEFU_AGENT__OPENAI__RETRY_BACKOFF_S": "0",
        "KEFU_DINGTALK__TIMEOUT_S": "1",
        "KEFU_WANGWANG__TIMEOUT_S": "1",
        "KEFU_LISTENER__SUPERVISE_INTERVAL_MS": "200",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])),
        "PYTHONUNBUFFERED": "1",
    }


def default_env(data_dir: Path, broker_url: str) -> dict[str, str]:
    """Only where the run lives: every other setting is kefu's default, as an operator has it
    (the scenarios that measure recovery times run on these)."""
    return {
        "KEFU_DATA_DIR": str(data_dir),
        "KEFU_BROKER_URL": broker_url,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])),
        "PYTHONUNBUFFERED": "1",
    }


class ElsewhereWorker(WorkerProcess):
    """A worker as if on another host: its own host name, in a UTS namespace of its own
    (`unshare`, root). Processes of this host then cannot see whether its processes live, as
    across real hosts, and wait out its leases; it sees its own earlier processes as a host does."""

    def __init__(self, host: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.host = host

    def command(self) -> list[str]:
        rename = 'hostname "$0" && exec "$@"'
        return ["unshare", "--uts", "--fork", "sh", "-c", rename, self.host, *super().command()]


UNRECOVERABLE = re.compile(r"Unrecoverable error: (\w+)")


def exit_reason(process: KefuProcess) -> str:
    """Why a process exited, safe to print: its status and the error's class or KEFU_ code
    (never the error's text, which may quote message data)."""
    output = process.output()
    found = UNRECOVERABLE.findall(output)
    codes = process.kefu_codes()
    detail = f"unrecoverable {found[-1]}" if found else (codes[-1] if codes else "")
    return f"status {process.returncode()}" + (f", {detail}" if detail else "")


@dataclass
class Shard:
    """One shard of the rig: the account it serves, its settings, its processes' env, an app."""

    name: str
    account: str
    settings: Settings
    env: dict[str, str]
    app: Celery

    @property
    def store(self) -> DeliveryStore:
        return runtime_for(self.app).store


@dataclass
class Member:
    """One supervised process."""

    role: str
    process: KefuProcess
    shard: str = "default"
    restart_at: float | None = None  # a planned restart (after a kill), monotonic
    unplanned_exits: int = 0
    exit_reasons: Counter[str] = field(default_factory=Counter)


@dataclass
class RigConfig:
    workers: int = 2
    concurrency: int = 2
    listen: bool = True
    env: dict[str, str] = field(default_factory=dict)  # scenario settings on top of base_env
    shards: int = 1
    defaults: bool = False  # kefu's default settings (default_env) instead of base_env's short ones
    elsewhere: int = 0  # the last this many workers run as if on another host (ElsewhereWorker)
    instance: str | None = None  # KEFU_INSTANCE of every process of the one shard (default: the host's name)
    redis_persistent: bool = True  # False: a Redis that keeps nothing on disk (redis-wipe)
    # Workers on the pool kefu picks for their settings (no -P: a thread pool for a network
    # model, whose pool lives in the main process: no pool children to kill)
    kefu_pool: bool = False


class Rig:
    def __init__(self, root: Path, config: RigConfig, say: Say) -> None:
        self.root = root
        self.config = config
        self.say = say
        self.redis = RedisServer(root / "redis", persistent=config.redis_persistent)
        self.data_dir = root / "data"
        self.logs = root / "logs"
        self.members: list[Member] = []
        self.shards: list[Shard] = []
        self.faults: Counter[str] = Counter()
        self.last_fault_at = 0.0  # wall clock (s) of the last fault or the last restart it caused
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise, name="faults-supervisor", daemon=True)
        self.started = time.monotonic()
        self.settings: Settings
        self.env: dict[str, str] = {}
        self.app: Celery
        self.platform: SimulatedPlatform

    # -- life cycle ----------------------------------------------------------------------------
    def __enter__(self) -> Rig:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self.redis.start()
        if self.config.shards == 1:  # the default shard, as the suite always ran
            named = self.config.instance
            one_env: dict[str, str] = {"KEFU_INSTANCE": named} if named else {}
            one_overrides: dict[str, Any] = {"instance": named} if named else {}
            self.shards = [self._shard("default", ACCOUNT, self.data_dir, one_env, one_overrides)]
        else:
            platform_path = self.root / "platform.sqlite"
            for name in SHARD_NAMES[: self.config.shards]:
                instance = f"faults-{name}"
                env = {
                    "KEFU_SHARD": name,
                    "KEFU_INSTANCE": instance,
                    "KEFU_SIMULATOR__PLATFORM_PATH": str(platform_path),
                }
                overrides: dict[str, Any] = {
                    "shard": name, "instance": instance, "simulator": {"platform_path": platform_path},
                }  # fmt: skip
                self.shards.append(self._shard(name, f"{ACCOUNT}-{name}", self.root / f"data-{name}", env, overrides))
        first = self.shards[0]
        self.settings, self.app, self.env = first.settings, first.app, first.env
        self.platform = SimulatedPlatform(first.settings.simulator_path)
        for shard in self.shards:
            self._add_members(shard)
        for member in self.members:
            self._start(member)
        for member in self.workers:
            member.process.wait_ready(self.shard(member.shard).app, timeout_s=60)  # type: ignore[attr-defined]
        self._supervisor.start()
        self.say(f"rig up: redis :{self.redis.port}, {', '.join(m.role for m in self.members)}")

    def _shard(
        self, name: str, account: str, data_dir: Path, shard_env: dict[str, str], overrides: dict[str, Any]
    ) -> Shard:
        """A shard's store (with its account), and its settings (`overrides`: what `shard_env`
        tells its processes), processes' env and app."""
        settings = load_settings(data_dir=data_dir, broker_url=self.redis.url, **overrides)
        set_up_store(settings, account)
        base = default_env if self.config.defaults else base_env
        env = {**base(data_dir, self.redis.url), **shard_env, **self.config.env}
        return Shard(name, account, settings, env, make_app(settings))

    def _add_members(self, shard: Shard) -> None:
        """Its workers, beat and `kefu listen`; roles and logs say the shard when there are two."""
        prefix = "" if self.config.shards == 1 else f"{shard.name}/"

        def member(role: str, process: KefuProcess) -> None:
            self.members.append(Member(prefix + role, process, shard.name))

        def log(role: str) -> Path:
            return self.logs / f"{prefix.replace('/', '-')}{role}.log"

        for index in range(1, self.config.workers + 1):
            options: dict[str, Any] = {
                "beat": False, "concurrency": self.config.concurrency, "clean_env": True, "cwd": PROJECT_ROOT,
                "pool": "default" if self.config.kefu_pool else None,
            }  # fmt: skip
            worker: WorkerProcess
            if index > self.config.workers - self.config.elsewhere:
                worker = ElsewhereWorker(f"faults-host-{index}", shard.env, log(f"worker-{index}"), **options)
            else:
                worker = WorkerProcess(shard.env, log(f"worker-{index}"), **options)
            member(f"worker-{index}", worker)
        member("beat", BeatProcess(shard.env, log("beat"), True, PROJECT_ROOT))
        if self.config.listen:
            member("listen", ListenProcess(shard.env, log("listen"), True, PROJECT_ROOT))

    def close(self) -> None:
        self._stopping.set()
        if self._supervisor.is_alive():
            self._supervisor.join(5)
        for member in self.members:
            try:
                member.process.stop(timeout_s=5)
            except Exception as error:  # keep stopping the others
                self.say(f"stopping {member.role} failed ({type(error).__name__})")
        self.redis.stop()

    @property
    def store(self) -> DeliveryStore:
        return runtime_for(self.app).store

    @property
    def workers(self) -> list[Member]:
        return [m for m in self.members if isinstance(m.process, WorkerProcess)]

    @property
    def listeners(self) -> list[Member]:
        return [m for m in self.members if isinstance(m.process, ListenProcess)]

    @property
    def homes(self) -> list[tuple[DeliveryStore, str]]:
        """Each shard's store with the account it serves."""
        return [(shard.store, shard.account) for shard in self.shards]

    def shard(self, name: str) -> Shard:
        return next(s for s in self.shards if s.name == name)

    def member(self, role: str) -> Member:
        return next(m for m in self.members if m.role == role)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    # -- supervision ---------------------------------------------------------------------------
    def _start(self, member: Member) -> None:
        member.process.start()

    def _supervise(self) -> None:
        while not self._stopping.wait(TICK_S):
            with self._lock:
                for member in self.members:
                    self._tend(member)

    def _tend(self, member: Member) -> None:
        if member.process.running():
            return
        now = time.monotonic()
        if member.restart_at is None:
            reason = exit_reason(member.process)
            member.unplanned_exits += 1
            member.exit_reasons[reason] += 1
            member.restart_at = now + UNPLANNED_RESTART_S
            self.say(f"{member.role} exited by itself ({reason}); restarting")
        if now >= member.restart_at:
            member.process.kill()  # what is left of its process group (orphaned pool children)
            self._start(member)
            member.restart_at = None
            self.last_fault_at = time.time()

    def stranded(self) -> Counter[str]:
        """Broker messages delivered to a consumer and never acknowledged (a killed worker's):
        Redis hands them out again only after the visibility timeout. By task name."""
        client = redis.Redis.from_url(self.redis.url, socket_timeout=5)
        names: Counter[str] = Counter()
        for raw in client.hvals("unacked"):
            try:
                names[json.loads(raw)[0]["headers"]["task"]] += 1
            except (ValueError, KeyError, IndexError, TypeError):
                names["(unreadable)"] += 1
        return names

    def unplanned_exits(self) -> dict[str, str]:
        """Per process that exited by itself: how often, and why."""
        return {
            m.role: f"{m.unplanned_exits} ({', '.join(f'{why} ×{n}' for why, n in m.exit_reasons.items())})"
            for m in self.members
            if m.unplanned_exits
        }

    # -- faults --------------------------------------------------------------------------------
    def _fault(self, kind: str, what: str) -> None:
        self.faults[kind] += 1
        self.last_fault_at = time.time()
        self.say(f"[{self.elapsed():6.1f}s] {what}")

    def kill_main(self, member: Member, pause_s: float, with_pool: bool = False) -> bool:
        """SIGKILL a process's main pid (`with_pool`: its whole process group at once, as a
        container or host crash does; else its pool children are orphaned and finish what they
        hold until the restart). The supervisor starts it again after `pause_s`."""
        with self._lock:
            if not member.process.running():
                return False
            member.restart_at = time.monotonic() + pause_s
            if with_pool:
                member.process.kill()
            else:
                member.process.kill_main()
        if isinstance(member.process, ListenProcess):
            kind, what = "listener kills", member.role
        else:
            kind = "worker kills (main with its pool)" if with_pool else "worker kills (main alone)"
            what = f"{member.role} main" + (" with its pool" if with_pool else "")
        self._fault(kind, f"SIGKILL {what} (restart in {pause_s:.1f}s)")
        return True

    def kill_pool_child(self, member: Member, rng: random.Random) -> bool:
        """SIGKILL one prefork pool child; the worker's pool replaces it."""
        with self._lock:
            children = member.process.pool_children()
            if not member.process.running() or not children:
                return False
            try:
                os.kill(rng.choice(children), signal.SIGKILL)
            except ProcessLookupError:
                return False
        self._fault("pool child kills", f"SIGKILL a pool child of {member.role}")
        return True

    def restart_host(self, shard: str = "default") -> None:
        """Stop every process of the shard cleanly (a host rebooted: they let go of the shard's
        lease) and start them again: the next grant is a new one."""
        with self._lock:
            members = [m for m in self.members if m.shard == shard]
            for member in members:
                member.restart_at = float("inf")  # the supervisor leaves them alone meanwhile
                member.process.stop()
            self._fault("host restarts", f"host of shard {shard} restarted (every process stopped and started)")
            for member in members:
                self._start(member)
                member.restart_at = None
        for member in members:
            if isinstance(member.process, WorkerProcess):
                member.process.wait_ready(self.shard(shard).app, timeout_s=60)
        self.last_fault_at = time.time()

    def wipe_redis(self) -> None:
        """SIGKILL Redis and start it again empty: leases, grant counters, the account
        directory, the move journal and every queued broker message are gone."""
        self.redis.wipe()
        self._fault("redis wipes", "SIGKILL redis; it came back empty")

    def restart_redis(self, down_s: float) -> None:
        """SIGKILL Redis, and start it again on the same AOF after `down_s`."""
        self.redis.kill()
        self._fault("redis kills", f"SIGKILL redis (back in {down_s:.1f}s)")
        time.sleep(down_s)
        self.redis.start()
        self.last_fault_at = time.time()
