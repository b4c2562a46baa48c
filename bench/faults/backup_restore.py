"""backup-restore: a shard's host is lost, and its last backup, taken under traffic, is restored
on a fresh data dir and served again (issue 42; docs/recovery.md is the operator's procedure).

One shard on a private Redis, its simulated platform's ledger outside the data dir (the platform
outlives the host), workers, beat and `kefu listen` of instance faults-lost. With the workload
running, `kefu backup` (the real command) copies the shard while they write; the traffic goes on;
every process of the host is SIGKILLed for good; once its shard lease has lapsed (`kefu restore`
refuses while anyone serves the shard), `kefu restore` puts the backup in place on a fresh data
dir and instance faults-restored (workers, beat, `kefu listen`) serves it; the workload runs to
its end. The shard lease is 4 s here (KEFU_SHARD_LEASE_S), the rig's other settings the suite's.

The audit reads the platform's ledger and both stores: the lost host's data dir is kept only to
tell which host sent what. Each offered buyer message is
  answered exactly once   one reply reached the platform, from either host
  held for an operator    no reply, and the restored store lists it (`kefu restore-gap`): input
                          waiting or admitted at the backup, or input of the window between the
                          backup and the restore that the platform delivered again
  doubled                 two replies (a request id received twice, or two requests)
  lost                    none of these
and every message written after the backup must be in the restored store: recovered from the
platform, whose listener pages again from the backup's cursor. Pass: lost = doubled = 0 (no
send unknown to both stores), every message after the backup recovered, backup and restore
exited 0, and the new host answered what came after the restore.
"""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.faults.options import Options
from bench.faults.report import RunReport, settle
from bench.faults.rig import ACCOUNT, PROJECT_ROOT, Rig, RigConfig, Say, Shard, base_env
from bench.faults.standby import PlainShard, wait_for
from bench.faults.traffic import LINGER_S, STALL_S
from bench.faults.workload import Workload
from config import load_settings
from runtime.store import DeliveryStore, queries
from runtime.store.backup import gap_report, held_lines, read_manifest
from transports.simulator import SimulatedPlatform
from transports.simulator.transport import platform_message_id
from worker.celery_app import make_app
from worker.coordination import RedisCoordinator
from worker.process import WorkerProcess

LOST, RESTORED = "faults-lost", "faults-restored"
BACKUP_AT = 0.25  # of the workload's window: `kefu backup` under traffic
KILL_AT = 0.45  # the host is lost; offering goes on
SHARD_LEASE_S = 4.0  # how soon the lost host's lease lapses, so the restore may begin
# Each send takes this long on the platform: replies are in flight when the backup is taken, so
# the restore has sends to make result-unknown and settle by the platform's receipts.
SEND_LATENCY_MS = 1000
COMMAND_TIMEOUT_S = 120.0


class RestoreRig(Rig):
    """The one shard of the suite's rig, its platform ledger outside the data dir and the
    driver's stores unguarded (the driver never joins the shard's lease); then, after the host
    is lost, the same shard served by a new instance from a restored data dir."""

    def __init__(self, root: Path, config: RigConfig, say: Say) -> None:
        super().__init__(root, config, say)
        self.platform_path = root / "platform.sqlite"
        self.backup_dir = root / "backup"
        self.restored_dir = root / "data-restored"
        self.lost: Shard | None = None

    def _shard(
        self, name: str, account: str, data_dir: Path, shard_env: dict[str, str], overrides: dict[str, Any]
    ) -> Shard:
        shard = super()._shard(name, account, data_dir, {**shard_env, **self._outside_env()}, overrides)
        settings = shard.settings.model_copy(
            update={"simulator": shard.settings.simulator.model_copy(update={"platform_path": self.platform_path})}
        )
        return PlainShard(shard.name, shard.account, settings, shard.env, shard.app)

    def _outside_env(self) -> dict[str, str]:
        return {"KEFU_SIMULATOR__PLATFORM_PATH": str(self.platform_path), "KEFU_SHARD_LEASE_S": f"{SHARD_LEASE_S:g}"}

    @property
    def store(self) -> DeliveryStore:
        return self.shards[0].store

    def close(self) -> None:
        super().close()
        for shard in [*self.shards, *([self.lost] if self.lost else [])]:
            shard.store.close()

    def kefu(self, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        """A `kefu` command, as an operator runs it on the host, its output kept in the logs."""
        command = [sys.executable, "-c", "from worker.cli import main; main()", *args]
        clean = {k: v for k, v in os.environ.items() if not k.startswith("KEFU_")}
        done = subprocess.run(
            command,
            cwd=PROJECT_ROOT,
            env={**clean, **env, "KEFU_LANGUAGE": "en"},
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        self.logs.mkdir(parents=True, exist_ok=True)
        (self.logs / f"kefu-{args[0]}.log").write_text(done.stdout + done.stderr, encoding="utf-8")
        return done

    def lose_host(self) -> float:
        """SIGKILL every process of the shard's host, never to restart; the wall time after."""
        with self._lock:
            for member in self.members:
                member.restart_at = math.inf
                member.process.kill()
                member.role = f"lost/{member.role}"
            killed_at = time.time()
        self._fault("host lost", "SIGKILL every process of the shard's host (its data dir is gone with it)")
        return killed_at

    def serve_restored(self) -> None:
        """The restored data dir served by a new instance: workers, beat, `kefu listen`."""
        overrides: dict[str, Any] = {
            "instance": RESTORED,
            "simulator": {"platform_path": self.platform_path},
            "shard_lease_s": SHARD_LEASE_S,
        }
        settings = load_settings(data_dir=self.restored_dir, broker_url=self.redis.url, **overrides)
        env = {
            **base_env(self.restored_dir, self.redis.url),
            **self._outside_env(),
            "KEFU_INSTANCE": RESTORED,
            **self.config.env,
        }
        shard = PlainShard("default", ACCOUNT, settings, env, make_app(settings))
        self.lost, self.shards = self.shards[0], [shard]
        self.settings, self.app, self.env = settings, shard.app, env
        with self._lock:  # the supervisor sees them only once started
            began = len(self.members)
            self._add_members(shard)
            for member in self.members[began:]:
                self._start(member)
        for member in self.members[began:]:
            if isinstance(member.process, WorkerProcess):
                member.process.wait_ready(shard.app, timeout_s=60)
        self.last_fault_at = time.time()


@dataclass
class HostsAudit:
    """Every offered buyer message, classified from the platform's ledger and both stores."""

    offered: int
    after_backup: int  # written after the backup's delivery snapshot
    recovered: int  # of those, stored in the restored store
    answered_once: int
    answered_by_lost_after_backup: int  # replies the lost host sent after the backup
    held: int  # no reply, listed for an operator by the restored store
    held_total: int  # every line the restore held (answered by the lost host or not)
    doubled: int
    unattributed_sends: int  # sends whose request id neither store knows
    lost: int
    after_restore: int  # written after the restore
    after_restore_answered: int  # of those, answered exactly once


def _store_view(store: DeliveryStore, account: str) -> tuple[dict[tuple[str, str], str | None], dict[str, str | None]]:
    """(conversation, platform message id) → batch id, and request id → batch id."""
    with store.read() as conn:
        lines = {(c, m): b for c, m, _, b in conn.execute(queries.inbound_message.BUYER_MESSAGE_STATES, {"a": account})}
        requests = {r: b for r, b, _ in conn.execute(queries.outbox_request.STATES_OF_ACCOUNT, {"a": account})}
    return lines, requests


def audit_hosts(
    lost: DeliveryStore, restored: DeliveryStore, platform: SimulatedPlatform, backup_at: int
) -> HostsAudit:
    window = gap_report(restored).windows[-1]
    held = {(c, m) for _, c, m in held_lines(restored, window.id)}
    sends = platform.received(ACCOUNT)
    per_ref = Counter(send.client_ref for send in sends)
    views = [_store_view(store, ACCOUNT) for store in (lost, restored)]
    sent_by_batch: list[dict[str | None, set[str]]] = []
    for _, requests in views:
        sent: dict[str | None, set[str]] = {}
        for request_id, batch_id in requests.items():
            if batch_id is not None and per_ref[request_id]:
                sent.setdefault(batch_id, set()).add(request_id)
        sent_by_batch.append(sent)
    counts: Counter[str] = Counter()
    late_sends = {s.client_ref for s in sends if s.received_at > backup_at}
    for message in platform.buyer_messages(ACCOUNT):
        key = (message.conversation_id, platform_message_id(message.seq))
        replies: set[str] = set()
        for (lines, _), by_batch in zip(views, sent_by_batch, strict=True):
            replies |= by_batch.get(lines.get(key), set())
        after_backup, after_restore = message.occurred_at >= backup_at, message.occurred_at >= window.restored_at
        counts["after_backup"] += after_backup
        counts["recovered"] += after_backup and key in views[1][0]
        counts["after_restore"] += after_restore
        counts["held_total"] += key in held
        if len(replies) == 1 and per_ref[next(iter(replies))] == 1:
            counts["answered_once"] += 1
            counts["after_restore_answered"] += after_restore
            by_lost = replies <= set(views[0][1]) - set(views[1][1])
            counts["answered_by_lost_after_backup"] += by_lost and bool(replies & late_sends)
        elif replies:
            counts["doubled"] += 1
        else:
            counts["held" if key in held else "lost"] += 1
    known = set(views[0][1]) | set(views[1][1])
    return HostsAudit(
        offered=len(platform.buyer_messages(ACCOUNT)),
        after_backup=counts["after_backup"],
        recovered=counts["recovered"],
        answered_once=counts["answered_once"],
        answered_by_lost_after_backup=counts["answered_by_lost_after_backup"],
        held=counts["held"],
        held_total=counts["held_total"],
        doubled=counts["doubled"],
        unattributed_sends=sum(n for ref, n in per_ref.items() if ref not in known),
        lost=counts["lost"],
        after_restore=counts["after_restore"],
        after_restore_answered=counts["after_restore_answered"],
    )


def _unknown_left(store: DeliveryStore) -> int:
    with store.read() as conn:
        states = conn.execute(queries.outbox_request.STATES_OF_ACCOUNT, {"a": ACCOUNT}).all()
    return sum(1 for _, _, state in states if state == "result-unknown")


def backup_restore(options: Options, root: Path, say: Say) -> RunReport:
    began = time.monotonic()
    workers = 1 if options.messages <= 200 else 2
    config = RigConfig(
        workers=workers, concurrency=2, instance=LOST, env={"KEFU_SIMULATOR__SEND_LATENCY_MS": str(SEND_LATENCY_MS)}
    )
    marks: dict[str, float] = {}
    rig = RestoreRig(root, config, say)
    with rig:
        workload = Workload(rig.platform, ACCOUNT, random.Random(f"workload-{options.seed}"), options.buyers)
        workload.start(options.messages, options.rate)
        offering = time.monotonic()
        try:
            window = max(options.window_s, 1.0)
            time.sleep(max(0.0, BACKUP_AT * window))
            wait_for(lambda: len(rig.platform.received(ACCOUNT)) > 0, 60, "a reply before the backup")
            taken = rig.kefu("backup", str(rig.backup_dir), env=rig.env)
            marks["backup_exit"] = taken.returncode
            say(f"[{rig.elapsed():6.1f}s] kefu backup exited {taken.returncode} ({workload.offered} offered so far)")
            time.sleep(max(0.0, offering + KILL_AT * window - time.monotonic()))
            marks["lost_at"] = rig.lose_host()
            coordinator = RedisCoordinator(rig.redis.url)
            marks["lapse_s"] = wait_for(
                lambda: coordinator.holder("default") is None, 60, "the lost host's lease to lapse"
            )
            restored_env = {**rig.env, "KEFU_DATA_DIR": str(rig.restored_dir), "KEFU_INSTANCE": RESTORED}
            done = rig.kefu("restore", str(rig.backup_dir), "--data-dir", str(rig.restored_dir), env=restored_env)
            marks["restore_exit"] = done.returncode
            say(f"[{rig.elapsed():6.1f}s] kefu restore exited {done.returncode}")
            if done.returncode == 0:
                rig.serve_restored()
            workload.join()
        finally:
            workload.stop()
        report = _conclude(rig, options, workload, marks)
    report.wall_s = time.monotonic() - began
    return report


def _conclude(rig: RestoreRig, options: Options, workload: Workload, marks: dict[str, float]) -> RunReport:
    report = RunReport(
        scenario=options.scenario,
        setup=f"{options.messages} messages, {options.buyers} buyers, {options.rate:g}/s · kefu listen · a host lost,"
        f" its backup restored on a fresh data dir · seed {options.seed}",
        faults=dict(rig.faults),
        unplanned_exits=rig.unplanned_exits(),
    )
    report.checks = {
        "kefu backup exited 0": marks.get("backup_exit") == 0,
        "kefu restore exited 0": marks.get("restore_exit") == 0,
    }
    if rig.lost is None:
        return report
    rig.say(f"[{rig.elapsed():6.1f}s] {workload.offered} messages offered; waiting for the store to go quiet")
    report.settled = settle(rig.homes, rig.platform, options.settle_s, STALL_S, LINGER_S)
    manifest = read_manifest(rig.backup_dir)
    audit = audit_hosts(rig.lost.store, rig.store, rig.platform, manifest.delivery_at)
    gap = gap_report(rig.store)
    window = gap.windows[-1]
    held = [sum(getattr(h, kind) for h in gap.held) for kind in ("inputs", "batches", "sends", "gap")]
    report.rows += [
        ("offered", str(audit.offered)),
        ("answered exactly once (by either host)", str(audit.answered_once)),
        ("  of them by the lost host after the backup", str(audit.answered_by_lost_after_backup)),
        ("written after the backup", f"{audit.after_backup}, recovered into the restored store {audit.recovered}"),
        ("held for an operator, unanswered (kefu restore-gap)", f"{audit.held} (held in all {audit.held_total})"),
        ("written after the restore", f"{audit.after_restore}, answered exactly once {audit.after_restore_answered}"),
        ("doubled", f"{audit.doubled} (sends unknown to both stores {audit.unattributed_sends})"),
        ("lost (neither answered nor held)", str(audit.lost)),
        ("held at the restore", f"waiting {held[0]}, batches {held[1]}, replies made result-unknown {held[2]}"),
        ("held when the platform delivered the gap again", str(held[3])),
        ("result-unknown left", str(_unknown_left(rig.store))),
        ("backup: files, took", f"{len(manifest.files)}, {manifest.took_s:.2f} s under traffic"),
        ("host lost → lease lapsed", f"{marks.get('lapse_s', math.nan):.1f} s"),
        ("gap (backup → restore)", f"{(window.restored_at - window.backup_at) / 1000:.1f} s"),
    ]
    report.checks |= {
        "lost = 0": audit.lost == 0,
        "doubled = 0": audit.doubled == 0 and audit.unattributed_sends == 0,
        "every message after the backup recovered": audit.recovered == audit.after_backup,
        "the new host answered what came after the restore": audit.after_restore_answered == audit.after_restore,
        "the whole workload offered": workload.scheduled == options.messages,
    }
    return report
