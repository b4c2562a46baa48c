"""move-under-faults: `kefu accounts move` of an account under traffic, with kefu's default
settings (no shortened lease), while (a) the worker running one of the account's turns is
SIGKILLed (with its pool) as the move starts, its turn waiting on a slow model, and (b) the
mover process is SIGKILLed mid-move. Nobody reruns anything: the shards' beat must finish the
move, or roll it back, by itself.

Measured: fault → move finished (done or rolled back), fault → the last reply the platform
received, lost and doubled (audited on the store of the shard the account ends on), and
whether the account's input was left paused.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.faults.events import TaskTracker
from bench.faults.options import Options
from bench.faults.report import RunReport, merged_audit, settle
from bench.faults.rig import PROJECT_ROOT, Rig, RigConfig, Say
from bench.faults.traffic import MODEL_DELAY_S as SLOW_TURNS_DELAY_S
from bench.faults.traffic import STALL_S, SlowModel, setup_text
from bench.faults.workload import Workload
from runtime.placement.moves import FINAL_STEPS, load_move
from worker.coordination import RedisCoordinator

TURN_TASK = "kefu.agent.run_turn"
OP_ID = "faults-move"
MODEL_DELAY_S = 3.0  # per model response: a turn is waiting on the model for seconds
MOVER_KILL_AFTER_S = 1.0  # fault (b): after the mover wrote the journal (the move is under way)
MOVER_START_PATIENCE_S = 45.0  # its start (imports) takes seconds on a loaded 2-core host
MOVE_BOUND_S = 60.0  # the pass bound: fault → move finished or rolled back
TURN_PATIENCE_S = 30.0  # for a turn of the account to be running when the faults come


def move_under_faults(options: Options, root: Path, say: Say) -> RunReport:
    from tests.fakes.openai_server import FakeOpenAI

    with FakeOpenAI(policy=SlowerModel()) as fake:
        env = {  # the model's endpoint only: every lease, timeout and interval stays kefu's default
            "KEFU_AGENT__PROVIDER": "openai",
            "KEFU_AGENT__OPENAI__BASE_URL": fake.base_url,
            "KEFU_AGENT__OPENAI__MODEL": "fake-slow",
            "KEFU_AGENT__OPENAI__API_KEY": "fake-key",
        }
        config = RigConfig(listen=True, env=env, shards=2, defaults=True)
        return _run(options, config, root, say)


class SlowerModel(SlowModel):
    """The slow-turns model (numbered replies), answering after MODEL_DELAY_S."""

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        time.sleep(max(MODEL_DELAY_S - SLOW_TURNS_DELAY_S, 0))
        return super().__call__(request)


def _run(options: Options, config: RigConfig, root: Path, say: Say) -> RunReport:
    began = time.monotonic()
    with Rig(root, config, say) as rig:
        source, target = rig.shards
        coordination = RedisCoordinator(rig.redis.url)
        workload = Workload(rig.platform, [source.account], random.Random(f"workload-{options.seed}"), options.buyers)
        tracker = TaskTracker(source.app).start()
        workload.start(options.messages, options.rate)
        try:
            fault_at = _faults(rig, tracker, source.account, target.name, root, say)
            finished_at = _wait_final(coordination, fault_at, options.settle_s)
            workload.join()
        finally:
            workload.stop()
            tracker.stop()
        record = load_move(coordination, OP_ID)
        placement = coordination.placement(source.account)
        home = rig.shard(placement.shard if placement else source.name)
        say(f"[{rig.elapsed():6.1f}s] move {record.step if record else 'missing'}; waiting for quiet")
        homes = [(home.store, source.account)]
        settled = settle(homes, rig.platform, options.settle_s, STALL_S, 3.0)
        audit = merged_audit(homes, rig.platform)
        paused = _paused(rig, source.account)
        report = RunReport(
            scenario=options.scenario,
            setup=setup_text(options, config, None) + f" · kefu's default settings · seed {options.seed}",
            audit=audit,
            faults=dict(rig.faults),
            unplanned_exits=rig.unplanned_exits(),
        )
        report.settled = settled
        took = None if finished_at is None else finished_at - fault_at
        last_reply = None if audit.last_reply_at_ms is None else audit.last_reply_at_ms / 1000 - fault_at
        report.last_fault_to_last_reply_s = last_reply
        step = record.step if record else "missing"
        report.rows += [
            ("move", f"{step} on {home.name}" + (f" ({record.error})" if record and record.error else "")),
            ("fault → move finished", f"{took:.1f} s" if took is not None else f"not within {options.settle_s:g} s"),
            ("fault → last reply", f"{last_reply:.1f} s" if last_reply is not None else "-"),
            ("input paused at the end", ", ".join(paused) or "nowhere"),
        ]
        report.checks = {
            "lost = 0": audit.lost == 0,
            "doubled = 0": audit.doubled == 0 and audit.unattributed_sends == 0,
            f"move finished ≤ {MOVE_BOUND_S:g} s after the fault": took is not None and took <= MOVE_BOUND_S,
            "input not left paused": not paused,
            "the whole workload offered": workload.scheduled == options.messages,
        }
    report.wall_s = time.monotonic() - began
    return report


def _faults(rig: Rig, tracker: TaskTracker, account: str, target: str, root: Path, say: Say) -> float:
    """(a) SIGKILL the source worker (with its pool) running a turn of the account, and start
    the mover at once; (b) SIGKILL the mover once the move is under way. Returns when (a) hit."""
    worker = _running_a_turn(rig, tracker)
    if worker is None:
        raise RuntimeError(f"no turn of {account} was running within {TURN_PATIENCE_S:g} s")
    rig.kill_main(worker, pause_s=1.0, with_pool=True)
    fault_at = time.time()
    log = (root / "logs" / "mover.log").open("wb")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KEFU_")}
    env = {**clean, **rig.shard("a").env, "KEFU_INSTANCE": "mover"}
    command = ["-c", "from worker.cli import main; main()", "accounts", "move", account, "--to", target]
    mover = subprocess.Popen(
        [sys.executable, *command, "--op-id", OP_ID],
        cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    coordination = RedisCoordinator(rig.redis.url)
    deadline = time.monotonic() + MOVER_START_PATIENCE_S  # the mover's start takes seconds on a loaded host
    while load_move(coordination, OP_ID) is None and mover.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(MOVER_KILL_AFTER_S)
    if mover.poll() is None:
        mover.kill()
        rig.faults["mover kills"] += 1
        say(f"[{rig.elapsed():6.1f}s] SIGKILL the mover mid-move")
    else:
        say(f"[{rig.elapsed():6.1f}s] the mover had exited already ({mover.returncode})")
    threading.Thread(target=mover.wait, daemon=True).start()
    log.close()
    return fault_at


def _running_a_turn(rig: Rig, tracker: TaskTracker) -> Any:
    deadline = time.monotonic() + TURN_PATIENCE_S
    while time.monotonic() < deadline:
        hosts = tracker.holders(TURN_TASK)
        for member in rig.workers:
            name = getattr(member.process, "node_name", "")
            if member.shard == "a" and member.process.running() and any(h.startswith(f"{name}@") for h in hosts):
                return member
        time.sleep(0.05)
    return None


def _wait_final(coordination: RedisCoordinator, fault_at: float, bound_s: float) -> float | None:
    """When the move's journal reached done or rolled back (wall clock), or None past the bound."""
    while time.time() - fault_at < bound_s:
        record = load_move(coordination, OP_ID)
        if record is not None and record.step in FINAL_STEPS:
            return record.updated_at / 1000
        time.sleep(0.2)
    return None


def _paused(rig: Rig, account: str) -> list[str]:
    """The shards whose store keeps the account's input paused."""
    found = []
    for shard in rig.shards:
        with shard.store.read() as conn:
            if conn.execute("SELECT 1 FROM input_pause WHERE scope = :a", {"a": account}).first():
                found.append(shard.name)
    return found
