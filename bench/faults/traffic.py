"""The scenarios that run the workload against a rig while faults hit it: kill-workers,
broker-restart and slow-turns. Each ends with the audit of `conclude`."""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.faults.events import TaskTracker
from bench.faults.options import Options
from bench.faults.report import RunReport, merged_audit, merged_scan, settle
from bench.faults.rig import Member, Rig, RigConfig, Say
from bench.faults.workload import Publisher, Workload
from runtime.agent.session_log import CorruptSessionLog, SessionLog
from worker.audit import scan_session_logs

INGEST_TASK = "kefu.ingest.page"
STALL_S = 12.0  # quiet and unchanged this long: what is left unanswered is lost
LINGER_S = 3.0  # after everything is answered: long enough for a late second reply to show

Inject = Callable[[Rig, Workload, random.Random], None]


def _wait_until(start: float, at: float) -> None:
    delay = start + at - time.monotonic()
    if delay > 0:
        time.sleep(delay)


BURST = 8  # messages offered just before a kill: it lands while their pages and turns are in flight
BURST_SPREAD_S = 0.25


def _kill_one(rig: Rig, rng: random.Random, main: bool, with_pool: bool, patience_s: float = 15) -> bool:
    """Kill a main process (or a pool child) of some running worker; False if none was up."""
    deadline = time.monotonic() + patience_s
    while time.monotonic() < deadline:
        for member in rng.sample(rig.workers, len(rig.workers)):
            if main and rig.kill_main(member, rng.uniform(0.5, 2.0), with_pool):
                return True
            if not main and rig.kill_pool_child(member, rng):
                return True
        time.sleep(0.3)
    return False


def _holding_a_page(rig: Rig, tracker: TaskTracker, rng: random.Random, wait_s: float = 1.0) -> Member | None:
    """A running worker holding a page (an ingest task) not finished yet, if one shows up:
    preferably one that no pool process has begun, so none of it is committed."""
    deadline = time.monotonic() + wait_s
    while (now := time.monotonic()) < deadline:
        hosts = tracker.holders(INGEST_TASK, waiting_only=now < deadline - wait_s / 2)
        holders = [m for m in rig.workers if m.process.running() and any(_runs_as(m, h) for h in hosts)]
        if holders:
            return rng.choice(holders)
        time.sleep(0.005)
    return None


def _runs_as(member: Member, hostname: str) -> bool:
    return hostname.startswith(f"{getattr(member.process, 'node_name', '')}@")


def inject_kills(options: Options, tracker: TaskTracker) -> Inject:
    """SIGKILL worker mains and pool children alternately at seeded times across the workload
    (a main with its pool at once, twice, then a main alone, and so on), and `kefu listen` now
    and then when it runs. Each kill follows a short burst of the workload's next messages, and
    a main kill goes to a worker holding a page that is not ingested yet when there is one
    (seen in Celery's task events): the window in which the broker can lose a page is open
    only then."""

    def inject(rig: Rig, workload: Workload, rng: random.Random) -> None:
        start = time.monotonic()
        window = max(options.window_s, 1.0)
        times = sorted(rng.uniform(0.05, 1.0) * window for _ in range(options.kills))
        listeners = rig.listeners  # one per shard; each is killed at least once
        listener_kills = max(len(listeners), options.kills // 10) if rig.config.listen and options.kills else 0
        # In the second half: a killed listener's lease keeps its successor waiting (30 s before
        # KEFU_LISTENER__LEASE_S), and pages only flow again through the reconciler's catch-up.
        later = range(options.kills // 2, options.kills)
        listener_slots = set(rng.sample(later, min(listener_kills, len(later))))
        listener_turns = itertools.count()  # the listeners take turns
        for index, at in enumerate(times):
            _wait_until(start, at)
            if index in listener_slots:
                listener = listeners[next(listener_turns) % len(listeners)]
                rig.kill_main(listener, pause_s=rng.uniform(0.5, 2.0))
            main, with_pool = index % 2 == 0, index % 6 != 4  # main kills: with its pool, with, alone, …
            main = main or rig.config.kefu_pool  # a thread pool has no pool processes of its own
            burst = threading.Thread(target=workload.burst, args=(BURST, BURST_SPREAD_S), daemon=True)
            burst.start()
            target = _holding_a_page(rig, tracker, rng) if main else None
            if target is not None and rig.kill_main(target, rng.uniform(0.5, 2.0), with_pool):
                rig.faults["main kills with a page in flight"] += 1
                rig.say(f"({target.role} was holding a page not ingested yet)")
            elif not _kill_one(rig, rng, main, with_pool):
                rig.say("no worker was up to kill within 15 s")
            burst.join()

    return inject


def inject_redis_restarts(options: Options) -> Inject:
    """SIGKILL Redis at seeded times across the workload; it comes back on the same AOF."""

    def inject(rig: Rig, workload: Workload, rng: random.Random) -> None:
        start = time.monotonic()
        window = max(options.window_s, 1.0)
        for at in sorted(rng.uniform(0.1, 0.9) * window for _ in range(options.kills)):
            _wait_until(start, at)
            rig.restart_redis(down_s=rng.uniform(0.5, 2.0))

    return inject


def no_injection(rig: Rig, workload: Workload, rng: random.Random) -> None:
    return None


def run_traffic(
    options: Options,
    config: RigConfig,
    root: Path,
    say: Say,
    inject: Inject,
    linger_s: float = LINGER_S,
    stall_s: float = STALL_S,
    audit: Callable[[Rig, RunReport], None] | None = None,
) -> RunReport:
    """Start the rig, offer the workload while `inject` runs, settle, audit (`audit`: the
    scenario's own look at the rig before it stops)."""
    began = time.monotonic()
    with Rig(root, config, say) as rig:
        by_account = {shard.account: shard.app for shard in rig.shards}
        publisher = Publisher(rig.app, by_account) if options.direct else None
        accounts = [shard.account for shard in rig.shards]
        workload = Workload(
            rig.platform, accounts, random.Random(f"workload-{options.seed}"), options.buyers, publisher
        )
        workload.start(options.messages, options.rate)
        try:
            inject(rig, workload, random.Random(options.seed))
            workload.join()
        finally:
            workload.stop()
        say(f"[{rig.elapsed():6.1f}s] {workload.offered} messages offered; waiting for the store to go quiet")
        settled = settle(rig.homes, rig.platform, options.settle_s, stall_s, linger_s)
        report = conclude(rig, options, publisher, workload)
        report.settled = settled
        if audit is not None:
            audit(rig, report)
    report.wall_s = time.monotonic() - began
    return report


def setup_text(options: Options, config: RigConfig, publisher: Publisher | None) -> str:
    path = f"direct publishing via {publisher.via}" if publisher else "kefu listen"
    pool = f"{config.workers} prefork workers × {config.concurrency}"
    if config.kefu_pool:
        pool = f"{config.workers} workers on the pool kefu picks (a network model's: threads)"
    if config.shards > 1:
        pool = f"{config.shards} shards, each {pool}"
    return f"{options.messages} messages, {options.buyers} buyers, {options.rate:g}/s · {path} · {pool} · beat"


def conclude(rig: Rig, options: Options, publisher: Publisher | None, workload: Workload) -> RunReport:
    """The audit of the final state, with what the rig saw, and the checks every run must pass."""
    audit = merged_audit(rig.homes, rig.platform)
    report = RunReport(
        scenario=options.scenario,
        setup=setup_text(options, rig.config, publisher) + f" · seed {options.seed}",
        audit=audit,
        logs=merged_scan([scan_session_logs(shard.store, shard.settings.sessions_dir) for shard in rig.shards]),
        faults=dict(rig.faults),
        unplanned_exits=rig.unplanned_exits(),
    )
    if audit.last_reply_at_ms is not None and rig.last_fault_at:
        report.last_fault_to_last_reply_s = audit.last_reply_at_ms / 1000 - rig.last_fault_at
    report.rows.append(("broker messages left unacked", _stranded_text(rig)))
    if rig.config.listen:
        report.rows.append(("listener at the end", _listener_text(rig)))
    if publisher is not None:
        report.rows.append(("direct publish retries", f"{publisher.retries} (gave up on {workload.unpublished})"))
    report.checks = {
        "lost = 0": audit.lost == 0,
        "doubled = 0": audit.doubled == 0 and audit.unattributed_sends == 0,
        "the whole workload offered": workload.scheduled == options.messages,
    }
    return report


def _stranded_text(rig: Rig) -> str:
    stranded = rig.stranded()
    by_task = ", ".join(f"{task} {n}" for task, n in sorted(stranded.items()))
    return f"{sum(stranded.values())}" + (f"  ({by_task})" if stranded else "")


def _listener_text(rig: Rig) -> str:
    states = []
    for shard in rig.shards:
        with shard.store.read() as conn:
            state, error = conn.execute(
                "SELECT listener_state, last_error FROM account WHERE id = :a", {"a": shard.account}
            ).one()
        shown = state + (f" ({error})" if error else "")
        states.append(shown if len(rig.shards) == 1 else f"{shard.name}: {shown}")
    return "; ".join(states)


# -- the scenarios -------------------------------------------------------------------------------


def kill_workers(options: Options, root: Path, say: Say) -> RunReport:
    def inject(rig: Rig, workload: Workload, rng: random.Random) -> None:
        tracker = TaskTracker(rig.app).start()
        try:
            inject_kills(options, tracker)(rig, workload, rng)
        finally:
            tracker.stop()

    with _agent(options) as config:
        report = run_traffic(options, config, root, say, inject)
    in_flight = report.faults.pop("main kills with a page in flight", 0)
    report.rows.append(("main kills aimed at a page in flight", str(in_flight)))
    kills = sum(n for kind, n in report.faults.items() if kind.startswith(("worker kills", "pool child")))
    report.checks[f"≥ {options.kills} worker kills"] = kills >= options.kills
    return report


def broker_restart(options: Options, root: Path, say: Say) -> RunReport:
    with _agent(options) as config:
        report = run_traffic(options, config, root, say, inject_redis_restarts(options))
    report.checks[f"≥ {options.kills} redis kills"] = report.faults.get("redis kills", 0) >= options.kills
    return report


# kill-workers and broker-restart with --network-model: per model response, and the timeout of
# a call (× 1 attempt, within the 5 s turn lease of base_env)
NETWORK_MODEL_DELAY_S = 0.5
NETWORK_MODEL_TIMEOUT_S = 2.0


@contextmanager
def _agent(options: Options) -> Iterator[RigConfig]:
    """The rig of kill-workers and broker-restart: the rules agent on prefork workers, or with
    `--network-model` a fake model taking NETWORK_MODEL_DELAY_S per call, on the pool kefu picks."""
    config = RigConfig(listen=not options.direct, shards=options.shards)
    if not options.network_model:
        yield config
        return
    from tests.fakes.openai_server import FakeOpenAI

    with FakeOpenAI(policy=SlowModel(NETWORK_MODEL_DELAY_S)) as fake:
        config.env = {**_openai_env(fake.base_url), "KEFU_AGENT__OPENAI__TIMEOUT_S": str(NETWORK_MODEL_TIMEOUT_S)}
        config.kefu_pool = True
        yield config


def _openai_env(base_url: str) -> dict[str, str]:
    return {
        "KEFU_AGENT__PROVIDER": "openai",
        "KEFU_AGENT__OPENAI__BASE_URL": base_url,
        "KEFU_AGENT__OPENAI__MODEL": "fake-slow",
        "KEFU_AGENT__OPENAI__API_KEY": "fake-key",
    }


# slow-turns: a model slower than the customer writer lease, so every turn outlives its lease.
TURN_LEASE_S = 3.0
MODEL_DELAY_S = 2.0  # per model response; a turn makes at least two calls
MODEL_TIMEOUT_S = 2.5  # > the delay (calls succeed), × 1 attempt < the lease (the startup rule)


def slow_turns(options: Options, root: Path, say: Say) -> RunReport:
    from tests.fakes.openai_server import FakeOpenAI

    with FakeOpenAI(policy=SlowModel()) as fake:
        env = {
            **_openai_env(fake.base_url),
            "KEFU_AGENT__OPENAI__TIMEOUT_S": str(MODEL_TIMEOUT_S),
            "KEFU_AGENT__OPENAI__MAX_ATTEMPTS": "1",
            "KEFU_AGENT__OPENAI__RETRY_BACKOFF_S": "0",
            "KEFU_AGENT__TURN_LEASE_S": str(TURN_LEASE_S),
        }
        config = RigConfig(listen=not options.direct, env=env, shards=options.shards, kefu_pool=options.network_model)
        report = run_traffic(options, config, root, say, no_injection, linger_s=3 * MODEL_DELAY_S + 2)
        model_calls = len(fake.requests)
    lengths = [_turn_lengths(sessions, TURN_LEASE_S) for sessions in sorted(root.glob("data*/sessions"))]
    long_turns, turns = sum(n for n, _ in lengths), sum(n for _, n in lengths)
    report.faults = {"turns longer than the lease": long_turns, **report.faults}
    report.rows += [
        ("model", f"{MODEL_DELAY_S:g} s per response, timeout {MODEL_TIMEOUT_S:g} s × 1 attempt"),
        ("customer writer lease", f"{TURN_LEASE_S:g} s"),
        ("model calls", str(model_calls)),
        ("turns (in loadable logs)", f"{turns}, of which {long_turns} outlived the lease"),
    ]
    if report.logs is not None:
        report.checks["corrupt session logs = 0"] = not report.logs.corrupt
    return report


class SlowModel:
    """The fake endpoint's default policy (one im_send_message echoing the buyer's lines, then
    a closing text), answering after `delay_s`. Like a real model it does not say the same
    thing twice: each reply is numbered, so a batch answered by two turns shows two different
    replies instead of being caught as the same text."""

    def __init__(self, delay_s: float = MODEL_DELAY_S, later_delay_s: float | None = None) -> None:
        self.delay_s = delay_s  # a turn's first call
        self.later_delay_s = delay_s if later_delay_s is None else later_delay_s  # calls after a tool result
        self.replies = 0
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        from tests.fakes.openai_server import default_policy

        first = request["messages"][-1]["role"] == "user"
        time.sleep(self.delay_s if first else self.later_delay_s)
        body = default_policy(request)
        for call in body["choices"][0]["message"].get("tool_calls") or []:
            if call["function"]["name"] == "im_send_message":
                with self._lock:
                    self.replies += 1
                    number = self.replies
                arguments = json.loads(call["function"]["arguments"])
                arguments["text"] += f"（{number}）"
                call["function"]["arguments"] = json.dumps(arguments, ensure_ascii=False)
        return body


def _turn_lengths(sessions_dir: Path, lease_s: float) -> tuple[int, int]:
    """(turns longer than the lease, turns) over the session logs that still load."""
    long_turns = turns = 0
    for path in sessions_dir.rglob("*.jsonl.zst"):
        try:
            events = SessionLog(path).load()
        except CorruptSessionLog:
            continue
        starts = {getattr(e, "turn", None): e.at for e in events if e.type == "turn/start"}
        for event in events:
            started = starts.get(getattr(event, "turn", None)) if event.type == "turn/end" else None
            if started is not None:
                turns += 1
                long_turns += (event.at - started) / 1000 > lease_s
    return long_turns, turns
