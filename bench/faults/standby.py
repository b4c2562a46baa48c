"""standby-takeover: the active instance dies as a host does, a standby instance takes over.

Two instances of the one (default) shard on the one data dir, as two hosts on shared storage:
the active one (`KEFU_INSTANCE` faults-active: workers, beat, `kefu listen`) holds the shard's
lease, the standby (faults-standby: the same commands) waits for it. With traffic running,
every process of the active instance is SIGKILLed at once (no shutdown, no release, nothing
acknowledged), and none comes back. The run measures, from that kill, when the standby's
grant claimed the store and when the platform received its first reply, and how many buyer
messages waited more than 5 s for their reply; lost and doubled as in every scenario.

Unlike the other scenarios, every lease keeps kefu's default (KEFU_SHARD_LEASE_S,
KEFU_LISTENER__LEASE_S, KEFU_AGENT__TURN_LEASE_S, …): what is measured is what an operator
gets. Only the data dir, the broker and the processes' instance names are set.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.faults.options import Options
from bench.faults.report import RunReport, settle
from bench.faults.rig import ACCOUNT, PROJECT_ROOT, Member, Rig, RigConfig, Say, Shard, default_env, set_up_store
from bench.faults.traffic import LINGER_S, STALL_S, conclude
from bench.faults.workload import Workload
from config import load_settings
from runtime.store import DeliveryStore
from worker.celery_app import make_app
from worker.coordination import RedisCoordinator
from worker.process import BeatProcess, ListenProcess, WorkerProcess

ACTIVE, STANDBY = "faults-active", "faults-standby"
SLOW_S = 5.0  # a buyer message that waited longer than this for its reply counts as delayed
FIRST_REPLY_MARGIN_S = 3.0  # the promise: the first reply within the shard lease plus this
KILL_AFTER = 0.3  # of the workload's window: the kill lands with traffic before and after it


def instance_env(data_dir: Path, broker_url: str, instance: str) -> dict[str, str]:
    """kefu's defaults (the rig's `default_env`), and which instance a process belongs to."""
    return {**default_env(data_dir, broker_url), "KEFU_INSTANCE": instance}


class PlainShard(Shard):
    """The shard as the driver reads it: the store opened without a guard, so the driver never
    asks for (or joins) the lease the two instances contend for."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._store = DeliveryStore(self.settings.delivery_path, self.settings.delivery)

    @property
    def store(self) -> DeliveryStore:
        return self._store


class StandbyRig(Rig):
    """One shard, two instances: each with its workers, beat and `kefu listen`. Members of the
    active instance are named `active/…`, of the standby `standby/…`. A killed member is not
    restarted (the host is gone); anything else that exits is, as in every rig."""

    def start(self) -> None:
        self.redis.start()
        settings = load_settings(data_dir=self.data_dir, broker_url=self.redis.url)
        set_up_store(settings, ACCOUNT)
        env = instance_env(self.data_dir, self.redis.url, ACTIVE)
        shard = PlainShard("default", ACCOUNT, settings, env, make_app(settings))
        self.shards = [shard]
        self.settings, self.app, self.env = settings, shard.app, env
        from transports.simulator import SimulatedPlatform

        self.platform = SimulatedPlatform(settings.simulator_path)
        self._add_instance("active", ACTIVE)
        for member in self.members:
            self._start(member)
        for member in self.instance("active"):
            if isinstance(member.process, WorkerProcess):
                member.process.wait_ready(shard.app, timeout_s=60)
        self._add_instance("standby", STANDBY)
        for member in self.instance("standby"):
            self._start(member)
        coordinator = RedisCoordinator(self.redis.url)
        wait_for(lambda: STANDBY in coordinator.standbys(settings.shard), 60, "the standby to announce itself")
        self._supervisor.start()
        self.say(f"rig up: redis :{self.redis.port}, {', '.join(m.role for m in self.members)}")

    @property
    def store(self) -> DeliveryStore:
        return self.shards[0].store

    def close(self) -> None:
        super().close()
        for shard in self.shards:
            shard.store.close()

    def _add_instance(self, prefix: str, instance: str) -> None:
        env = instance_env(self.data_dir, self.redis.url, instance)

        def log(role: str) -> Path:
            return self.logs / f"{prefix}-{role}.log"

        for index in range(1, self.config.workers + 1):
            worker = WorkerProcess(
                env, log(f"worker-{index}"), beat=False, concurrency=self.config.concurrency,
                clean_env=True, cwd=PROJECT_ROOT,
            )  # fmt: skip
            self.members.append(Member(f"{prefix}/worker-{index}", worker))
        self.members.append(Member(f"{prefix}/beat", BeatProcess(env, log("beat"), True, PROJECT_ROOT)))
        self.members.append(Member(f"{prefix}/listen", ListenProcess(env, log("listen"), True, PROJECT_ROOT)))

    def instance(self, prefix: str) -> list[Member]:
        return [m for m in self.members if m.role.startswith(f"{prefix}/")]

    def kill_instance(self, prefix: str) -> float:
        """SIGKILL every process (group) of the instance, never to restart: a host's death.
        Returns the wall clock time (s) when the last one was dead."""
        with self._lock:
            for member in self.instance(prefix):
                member.restart_at = math.inf
                member.process.kill()
            killed_at = time.time()
        self._fault("instance kills", f"SIGKILL every process of the {prefix} instance")
        return killed_at


def wait_for(condition: Callable[[], bool], bound_s: float, what: str) -> float:
    """Poll `condition` until it holds; the seconds it took (TimeoutError past `bound_s`)."""
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > bound_s:
            raise TimeoutError(f"timed out after {bound_s:g} s waiting for {what}")
        time.sleep(0.1)
    return time.monotonic() - began


def message_waits(rig: Rig) -> list[float]:
    """Per buyer message: seconds from its time to the first reply its conversation received
    after it (a batch answers every message it holds with one reply). Unanswered: inf."""
    sends = sorted(rig.platform.received(ACCOUNT), key=lambda s: s.received_at)
    waits = []
    for message in rig.platform.buyer_messages(ACCOUNT):
        reply = next(
            (
                s.received_at
                for s in sends
                if s.conversation_id == message.conversation_id and s.received_at >= message.occurred_at
            ),
            None,
        )
        waits.append(math.inf if reply is None else (reply - message.occurred_at) / 1000)
    return waits


def _claimed_at(rig: Rig) -> tuple[str, float] | None:
    """The newest grant that claimed the store: its owner and when (wall clock, s)."""
    with rig.store.read() as conn:
        row = conn.execute("SELECT owner, granted_at FROM shard_grant ORDER BY token DESC LIMIT 1").first()
    return None if row is None else (str(row[0]), int(row[1]) / 1000)


def standby_takeover(options: Options, root: Path, say: Say) -> RunReport:
    began = time.monotonic()
    workers = 1 if options.messages <= 200 else 2
    rig = StandbyRig(root, RigConfig(workers=workers, concurrency=2), say)
    with rig:
        settings = rig.settings
        workload = Workload(rig.platform, ACCOUNT, random.Random(f"workload-{options.seed}"), options.buyers)
        workload.start(options.messages, options.rate)
        try:
            kill_in_s = max(options.window_s * KILL_AFTER, 1.0)
            time.sleep(kill_in_s)  # the workload's schedule: the kill lands with traffic around it
            wait_for(lambda: len(rig.platform.received(ACCOUNT)) > 0, 60, "a reply from the active instance")
            killed_at = rig.kill_instance("active")
            bound = settings.shard_lease_s + 120
            wait_for(lambda: (c := _claimed_at(rig)) is not None and c[0] == STANDBY, bound, "the standby's grant")
            wait_for(
                lambda: any(s.received_at / 1000 > killed_at for s in rig.platform.received(ACCOUNT)),
                bound,
                "a reply from the standby",
            )
            workload.join()
        finally:
            workload.stop()
        say(f"[{rig.elapsed():6.1f}s] {workload.offered} messages offered; waiting for the store to go quiet")
        settled = settle(rig.homes, rig.platform, options.settle_s, STALL_S, LINGER_S)
        report = conclude(rig, options, None, workload)
        report.settled = settled
        report.setup = (
            f"{options.messages} messages, {options.buyers} buyers, {options.rate:g}/s · kefu listen · two instances"
            f" (each {workers} prefork worker(s) × 2, beat, kefu listen), default leases · seed {options.seed}"
        )
        claimed = _claimed_at(rig)
        grant_s = claimed[1] - killed_at if claimed is not None else math.nan
        replies_after = [
            s.received_at / 1000 for s in rig.platform.received(ACCOUNT) if s.received_at / 1000 > killed_at
        ]
        first_reply_s = min(replies_after) - killed_at if replies_after else math.inf
        waits = message_waits(rig)
        slow = sum(w > SLOW_S for w in waits)
        promise_s = settings.shard_lease_s + FIRST_REPLY_MARGIN_S
        report.rows += [
            ("shard lease (KEFU_SHARD_LEASE_S)", f"{settings.shard_lease_s:g} s"),
            ("kill → standby's grant (claims the store)", f"{grant_s:.1f} s"),
            ("kill → first reply by the standby", f"{first_reply_s:.1f} s"),
            (f"buyer messages that waited > {SLOW_S:g} s", f"{slow} of {len(waits)}"),
            ("longest wait for a reply", f"{max(waits, default=0):.1f} s"),
        ]
        report.checks[f"first reply ≤ shard lease + {FIRST_REPLY_MARGIN_S:g} s"] = first_reply_s <= promise_s
        report.checks["the standby claimed the store"] = claimed is not None and claimed[0] == STANDBY
    report.wall_s = time.monotonic() - began
    return report
