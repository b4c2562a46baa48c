"""Shards on one machine (SPEC 3.12): what a second shard buys, what a move and a takeover cost.

All on a private redis-server (appendonly, a free port) and real worker processes:

1. Throughput: the e2e workload (bench.e2e: a new simulated buyer per message, published
   through `receive_page`, rules agent) on ONE shard (one worker set serving both accounts)
   and on TWO shards (one worker set each, one account each, one simulated platform file).
   For each, the highest offered rate whose page -> reply p99 stays <= 150 ms with nothing
   unanswered: a step-up from a few rates, short windows, then a bisection step or two; a
   step that misses is measured once more before it counts. (The shards share one simulated
   platform file, which a real platform is not, and this machine's CPUs.)
2. Move: an account with 10,000 buyer messages of history, built by letting the workers
   answer them (the messages wait on the simulated platform, 20 per buyer, 100 with --quick;
   the source worker's listener pages them in, the rules agent replies), then `kefu accounts
   move` against running workers of both shards (each `--listen`, embedded beat). Then new
   buyers check that the target answers, and its store is audited.
3. Takeover: buyers write steadily to a shard whose holder (a worker with `--listen`) is
   SIGKILLed; a standby worker (another KEFU_INSTANCE, same data dir) waits for the lease.
   Seconds from the kill to the first reply the standby sent, and the longest any buyer
   message waited for its reply around the kill, per KEFU_SHARD_LEASE_S.

    python -m bench.shards [--quick] [--concurrency 2] [--history 10000]

--quick: shorter windows, fewer steps, the takeover with a 3 s lease only (under 2 min).
Exit status 0 when every phase ran and nothing was lost or doubled.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.e2e import Rig, offer
from bench.faults.redis_server import RedisServer
from config import Settings, load_settings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.routes import RouteSpec, create_route
from runtime.operators.status import is_quiet
from runtime.store import DeliveryStore
from transports.simulator import SimulatedPlatform
from transports.simulator.buyers import QUESTION, SteadyBuyers
from worker.audit import Audit, audit
from worker.celery_app import make_app
from worker.context import runtime_for
from worker.coordination import RedisCoordinator
from worker.process import WorkerProcess

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARD_WORKERS = (
    "one `celery worker -P solo --listen` with embedded beat per shard (per instance for the takeover),"
    " KEFU_RECONCILE__INTERVAL_S=0.5, __GRACE_S=2, KEFU_LISTENER__LEASE_S=3 (as tests/integration/test_shards.py)"
)
P99_BOUND_MS = 150.0
Lanes = list[tuple[Rig, str]]


# -- 1. throughput: one shard vs two ----------------------------------------------------------


@dataclass
class Step:
    rate: float
    p50: float | None
    p99: float | None
    unanswered: int
    samples: int
    attempt: int  # 2: the rate was measured again after it missed the bound once

    @property
    def ok(self) -> bool:
        return self.unanswered == 0 and self.p99 is not None and self.p99 <= P99_BOUND_MS


@dataclass
class Search:
    label: str
    steps: list[Step] = field(default_factory=list)

    @property
    def best(self) -> float:
        return max((s.rate for s in self.steps if s.ok), default=0.0)


def _quiet(lanes: Lanes, bound_s: float = 30) -> None:
    """Until every rig's store has nothing left in flight (after an overloaded step)."""
    deadline = time.monotonic() + bound_s
    rigs = {id(rig): rig for rig, _ in lanes}.values()
    while time.monotonic() < deadline and not all(is_quiet(runtime_for(rig.app).store) for rig in rigs):
        time.sleep(0.2)


def search(label: str, lanes: Lanes, rates: Sequence[float], window_s: float, samples: int, bisections: int) -> Search:
    """Step up through `rates` until p99 passes the bound (or a message goes unanswered), then
    bisect between the last rate that held and the first that did not. Each step offers at
    least `samples` messages (at least `window_s`); a step that misses is measured once more
    (one slow outlier decides a p99 of a hundred), and the second measurement counts."""
    found = Search(label)

    def once(rate: float, attempt: int) -> Step:
        run = offer(lanes, rate, max(window_s, samples / rate), drain_s=4)
        step = Step(rate, run.p(0.5), run.p(0.99), run.unanswered, run.offered, attempt)
        found.steps.append(step)
        if not step.ok:
            _quiet(lanes)
        time.sleep(0.5)
        return step

    def measure(rate: float) -> Step:
        step = once(rate, 1)
        return step if step.ok else once(rate, 2)

    good, bad = 0.0, None
    for rate in rates:
        if measure(rate).ok:
            good = rate
        else:
            bad = rate
            break
    for _ in range(bisections if bad is not None else 0):
        assert bad is not None
        middle = round((good + bad) / 2)
        if middle in (good, bad):
            break
        if measure(middle).ok:
            good = middle
        else:
            bad = middle
    return found


def throughput(root: Path, redis_url: str, concurrency: int, quick: bool, say: Console) -> list[Search]:
    rates = [20, 30, 40, 60] if quick else [10, 20, 30, 40, 50, 60, 80, 100, 120, 160]
    window_s, samples, bisections = (2.5, 60, 1) if quick else (4.0, 120, 2)
    layouts = {
        "one shard": [("one", ["shop-1", "shop-2"])],
        "two shards": [("a", ["shop-1"]), ("b", ["shop-2"])],
    }
    results = []
    for db, (label, shards) in enumerate(layouts.items(), start=1):
        folder = root / label.replace(" ", "-")
        broker = f"{redis_url.rsplit('/', 1)[0]}/{db}"
        rigs = [
            Rig(
                folder / name,
                broker,
                concurrency,
                shard=name,
                accounts=accounts,
                platform_path=folder / "platform.sqlite",
                flush=index == 0,
            )
            for index, (name, accounts) in enumerate(shards)
        ]
        for rig in rigs:
            rig.workers.start()
        try:
            for rig in rigs:
                rig.workers.wait_ready(rig.app, timeout_s=60)
            lanes = [(rig, account) for rig in rigs for account in rig.accounts]
            offer(lanes, 10, 3)  # warm-up
            _quiet(lanes)
            say.print(f"[dim]throughput: {label} ({len(rigs)} × worker -c {concurrency}) …[/dim]")
            results.append(search(label, lanes, rates, window_s, samples, bisections))
        finally:
            for rig in rigs:
                rig.workers.stop()
    return results


# -- shards with listening workers (move, takeover) ------------------------------------------


@dataclass
class Shard:
    """A shard served by `--listen` workers (embedded beat), as tests/integration/test_shards.py
    runs them; the driver reads its store without holding the lease."""

    name: str
    settings: Settings
    lease_s: float
    store: DeliveryStore = field(init=False)
    workers: list[WorkerProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.store = DeliveryStore(self.settings.delivery_path, self.settings.delivery)

    def add_account(self, account: str) -> None:
        create_account(self.store, AccountSpec(id=account, platform="simulator", identity=f"{account}-seller"))
        create_route(
            self.store, RouteSpec(id=f"{account}-direct", account_id=account, conversation_type="direct"), account
        )

    def env(self, instance: str) -> dict[str, str]:
        return {
            "KEFU_SHARD": self.name,
            "KEFU_DATA_DIR": str(self.settings.data_dir),
            "KEFU_BROKER_URL": self.settings.broker_url,
            "KEFU_INSTANCE": instance,
            "KEFU_SHARD_LEASE_S": f"{self.lease_s:g}",
            "KEFU_SIMULATOR__PLATFORM_PATH": str(self.settings.simulator_path),
            "KEFU_RECONCILE__INTERVAL_S": "0.5",
            "KEFU_RECONCILE__GRACE_S": "2",
            "KEFU_LISTENER__SUPERVISE_INTERVAL_MS": "100",
            "KEFU_LISTENER__LEASE_S": "3",
        }

    def start(self, instance: str, wait: bool = True) -> WorkerProcess:
        log = self.settings.data_dir / f"worker-{instance}.log"
        worker = WorkerProcess(self.env(instance), log, listen=True, clean_env=True, cwd=PROJECT_ROOT).start()
        self.workers.append(worker)
        if wait:
            worker.wait_ready(make_app(self.settings), timeout_s=60)
        return worker

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.store.close()

    def grants(self) -> list[tuple[int, str, int]]:
        with self.store.read() as conn:
            rows = conn.execute("SELECT token, owner, granted_at FROM shard_grant ORDER BY token")
            return [(int(token), str(owner), int(at)) for token, owner, at in rows]


def make_shard(root: Path, broker: str, name: str, lease_s: float = 15) -> Shard:
    settings = load_settings(
        data_dir=root / name, broker_url=broker, shard=name, simulator={"platform_path": root / "platform.sqlite"}
    )
    return Shard(name, settings, lease_s)


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.2) -> float:
    """Poll `condition()` until true; returns the seconds it took (raises on time-out)."""
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > timeout_s:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(poll_s)
    return time.monotonic() - began


def _answered(store: DeliveryStore, platform: SimulatedPlatform, account: str, expected: int) -> bool:
    result = audit(store, platform, account)
    return result.buyer_messages >= expected and result.answered == result.buyer_messages


def kefu(args: list[str], env: dict[str, str], timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    """The `kefu` command line of this checkout, as an operator runs it, in English: its
    output is read below ("done in … s"), and kefu speaks Chinese by default."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KEFU_")}
    return subprocess.run(
        [sys.executable, "-c", "from worker.cli import main; main()", *args],
        env={**clean, "KEFU_LANGUAGE": "en", **env, "COLUMNS": "200"},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


# -- 2. moving an account with history ------------------------------------------------------


@dataclass
class MoveResult:
    history: int
    buyers: int
    built_s: float
    turns: int
    wall_s: float
    reported_s: float | None
    detail: str
    first_reply_after_s: float
    final: Audit


def _slice_text(printed: str) -> str:
    """What the move's journal says it exported (the JSON `kefu accounts move` prints)."""
    try:
        detail: dict[str, Any] = json.loads(printed)
    except ValueError:
        return printed
    rows = detail.get("exported", {})
    shown = ", ".join(
        f"{table} {rows[table]}" for table in ("customer", "inbound_message", "outbox_request") if table in rows
    )
    return f"slice {detail.get('slice_bytes', 0) / 1e6:.1f} MB ({shown}, session logs {detail.get('sessions', 0)})"


def move(root: Path, broker: str, history: int, per_buyer: int, say: Console) -> MoveResult:
    account, buyers = "shop-m", max(1, history // per_buyer)
    source, target = make_shard(root, broker, "src"), make_shard(root, broker, "dst")
    source.add_account(account)
    target.add_account("shop-d")
    platform = SimulatedPlatform(source.settings.simulator_path)
    try:
        for index in range(history):  # each buyer's messages in a row: one or two pages, one or two turns
            buyer = f"h{index * buyers // history:05d}"
            platform.buyer_says(account, buyer, f"买家{buyer}", QUESTION)
        target.start("host-dst")
        say.print(f"[dim]move: {history} messages from {buyers} buyers waiting; the source answers them …[/dim]")
        began = time.monotonic()
        source.start("host-src")
        wait_until(lambda: _answered(source.store, platform, account, history), 600, "the history", 0.5)
        built_s = time.monotonic() - began  # from the source worker's start
        with source.store.read() as conn:
            turns = int(conn.execute("SELECT count(*) FROM admission_batch").scalar_one())
        say.print(f"[dim]move: history answered in {built_s:.1f} s ({turns} turns); kefu accounts move …[/dim]")
        began = time.monotonic()
        run = kefu(["accounts", "move", account, "--to", "dst", "--op-id", "bench-move"], source.env("mover"))
        wall_s = time.monotonic() - began
        if run.returncode != 0 or "done" not in run.stdout:
            raise RuntimeError(f"kefu accounts move failed ({run.returncode}): {run.stdout}{run.stderr}")
        took = re.search(r"done in ([0-9.]+) s \((.*)\)", " ".join(run.stdout.splitlines()))  # (wrapped lines)
        moved_at = time.time()
        for index in range(10):
            platform.buyer_says(account, f"after{index}", f"买家after{index}", QUESTION)
        wait_until(lambda: _answered(target.store, platform, account, history + 10), 60, "replies from the target")
        after_ms = [s.received_at for s in platform.received(account) if s.received_at / 1000 >= moved_at]
        return MoveResult(
            history=history,
            buyers=buyers,
            built_s=built_s,
            turns=turns,
            wall_s=wall_s,
            reported_s=float(took.group(1)) if took else None,
            detail=_slice_text(took.group(2)) if took else run.stdout.strip(),
            first_reply_after_s=min(after_ms) / 1000 - moved_at if after_ms else float("nan"),
            final=audit(target.store, platform, account),
        )
    finally:
        source.stop()
        target.stop()


# -- 3. a standby taking over a killed holder ------------------------------------------------


@dataclass
class Takeover:
    lease_s: float
    lease_taken_s: float  # kill -> the standby's grant (its first write claims the store)
    first_reply_s: float  # kill -> the first reply the platform received from the standby
    per_s: float  # buyer messages per second
    longest_wait_s: float  # the longest any buyer message waited for its reply
    delayed: int  # buyer messages that waited more than 1 s
    offered: int
    final: Audit


def takeover(root: Path, broker: str, lease_s: float, per_s: float, say: Console) -> Takeover:
    account = "shop-t"
    shard = make_shard(root, broker, "t", lease_s)
    shard.add_account(account)
    platform = SimulatedPlatform(shard.settings.simulator_path)
    try:
        holder = shard.start("host-1")
        shard.start("host-2", wait=False)
        coordination = RedisCoordinator(broker)
        wait_until(lambda: coordination.standbys("t") == ["host-2"], 60, "the standby to announce itself")
        say.print(f"[dim]takeover: lease {lease_s:g} s; buyers at {per_s:g}/s, SIGKILL of the holder …[/dim]")
        with SteadyBuyers(platform, [account], per_s, buyer=lambda n: f"t{n:05d}"):
            wait_until(lambda: len(platform.received(account)) >= 3 * per_s, 30, "replies from the holder")
            holder.kill()
            killed_at = time.time()
            wait_until(
                lambda: any(s.received_at / 1000 > killed_at for s in platform.received(account)),
                lease_s + 60,
                "a reply from the standby",
            )
            time.sleep(3)
        wait_until(lambda: _answered(shard.store, platform, account, 1), 60, "every buyer message answered")
        grants = shard.grants()
        replies: dict[str | None, int] = {}  # each buyer wrote once: its first reply
        for send in platform.received(account):
            replies.setdefault(send.recipient_id, send.received_at)
        waits = [(replies[m.buyer_id] - m.occurred_at) / 1000 for m in platform.buyer_messages(account)]
        after = [s.received_at / 1000 for s in platform.received(account) if s.received_at / 1000 > killed_at]
        return Takeover(
            lease_s=lease_s,
            lease_taken_s=grants[-1][2] / 1000 - killed_at if len(grants) > 1 else float("nan"),
            first_reply_s=min(after) - killed_at,
            per_s=per_s,
            longest_wait_s=max(waits),
            delayed=sum(w > 1 for w in waits),
            offered=len(waits),
            final=audit(shard.store, platform, account),
        )
    finally:
        shard.stop()


# -- the report -----------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def report(
    console: Console, concurrency: int, searches: list[Search], moved: MoveResult, takeovers: list[Takeover]
) -> bool:
    steps = Table(
        "layout", "offered msg/s", "n", "p50 ms", "p99 ms", "unanswered", f"p99 ≤ {P99_BOUND_MS:g}", title="step-up"
    )
    for found in searches:
        for step in found.steps:
            ok = ("yes" if step.ok else "no") + (" (measured again)" if step.attempt > 1 else "")
            cells = (f"{step.rate:g}", str(step.samples), _ms(step.p50), _ms(step.p99), str(step.unanswered), ok)
            steps.add_row(found.label, *cells)
    console.print(steps)
    one, two = (found.best for found in searches)
    table = Table("measure", "value", title=f"bench.shards (this machine: {os.cpu_count()} CPUs; one run)")
    table.add_row(
        "throughput workload",
        f"bench.e2e: a new buyer per message via receive_page, rules agent; per shard one worker -P prefork"
        f" -c {concurrency}; {P99_BOUND_MS:g} ms bound on page -> reply p99, nothing unanswered",
    )
    table.add_row(f"one shard: highest rate with p99 ≤ {P99_BOUND_MS:g} ms", f"{one:g} msg/s")
    table.add_row(f"two shards: highest rate with p99 ≤ {P99_BOUND_MS:g} ms", f"{two:g} msg/s")
    table.add_row("ratio two / one", f"{two / one:.2f}x" if one else "-")
    table.add_section()
    table.add_section()
    table.add_row("move, takeover: workers", SHARD_WORKERS)
    table.add_row(
        "move: history",
        f"{moved.history} buyer messages ({moved.buyers} buyers × {moved.history // moved.buyers}) left on the"
        f" simulated platform, paged in by the source's listener and answered by its worker before the move"
        f" ({moved.turns} turns, {moved.built_s:.1f} s from the worker's start)",
    )
    table.add_row("move: `kefu accounts move` wall time", f"{moved.wall_s:.1f} s")
    reported = f"{moved.reported_s:.1f} s" if moved.reported_s is not None else "-"
    table.add_row("move: as the command reports it", f"{reported}  {moved.detail}")
    table.add_row("move: first reply from the target after it", f"{moved.first_reply_after_s:.2f} s")
    table.add_row("move: target's audit", moved.final.line().removeprefix("demo: "))
    for result in takeovers:
        table.add_section()
        if result is takeovers[0]:
            table.add_row(
                "takeover: traffic", f"a new buyer every {1 / result.per_s:g} s; SIGKILL of the holder's group"
            )
        lease = f"takeover (KEFU_SHARD_LEASE_S={result.lease_s:g})"
        table.add_row(f"{lease}: kill → standby's grant", f"{result.lease_taken_s:.1f} s")
        table.add_row(f"{lease}: kill → first reply by the standby", f"{result.first_reply_s:.1f} s")
        table.add_row(f"{lease}: longest wait of a buyer message", f"{result.longest_wait_s:.1f} s")
        table.add_row(f"{lease}: messages that waited > 1 s", f"{result.delayed} of {result.offered}")
        table.add_row(f"{lease}: audit", result.final.line().removeprefix("demo: "))
    console.print(table)
    clean = [moved.final.clean, *(t.final.clean for t in takeovers)]
    return all(clean)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a run under 2 minutes")
    parser.add_argument("--concurrency", type=int, default=2, help="prefork processes per shard's worker")
    parser.add_argument("--history", type=int, default=10_000, help="buyer messages of the moved account")
    parser.add_argument("--keep", action="store_true", help="keep the run folder (data, logs)")
    args = parser.parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 140)
    progress = Console(stderr=True)
    began = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="kefu-bench-shards-"))
    redis_server = RedisServer(root / "redis").start()
    # Last at exit: this process's runtime joined the throughput shards' leases (to publish
    # through `receive_page`), and lets them go at exit.
    atexit.register(redis_server.stop)
    passed = False
    try:
        base = redis_server.url.rsplit("/", 1)[0]
        searches = throughput(root / "throughput", redis_server.url, args.concurrency, args.quick, progress)
        moved = move(root / "move", f"{base}/3", args.history, 100 if args.quick else 20, progress)
        leases = [3.0] if args.quick else [3.0, 15.0]
        takeovers = [
            takeover(root / f"takeover-{lease:g}", f"{base}/{4 + i}", lease, 10, progress)
            for i, lease in enumerate(leases)
        ]
        passed = report(console, args.concurrency, searches, moved, takeovers)
        console.print(f"wall time {time.monotonic() - began:.0f} s")
    finally:
        if args.keep or not passed:
            console.print(f"[dim]run folder: {root}[/dim]")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
