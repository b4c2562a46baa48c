"""Fault injection: does kefu lose or double a buyer's message under real faults?

A Jepsen-style run: a private redis-server (appendonly everysec, a free port, its own folder),
a fresh data dir with a simulator account and an enabled direct route, and real processes:
two prefork workers (`celery -A worker worker -P prefork -c 2`), one `celery -A worker beat`
and `kefu listen` (with --direct the driver publishes each page itself, through
`worker.dispatch.receive_page` when the project has it). A steady workload of FAQ-matching
messages from many simulated buyers runs while faults hit the processes on a schedule
seeded by --seed; then the run waits (bounded) until the delivery store is quiet, and a
checker reads the final state: the delivery store, the simulated platform's ledger of
received sends and every session log.

    python -m bench.faults kill-workers   [--messages 1000] [--kills 20] [--seed 1] [--direct]
    python -m bench.faults broker-restart [--kills 4]
    python -m bench.faults slow-turns     # a model slower than the customer writer lease
    python -m bench.faults log-damage     # a byte flipped mid-file in live session logs
    python -m bench.faults bad-start      # bad startup state must stop worker and beat
    python -m bench.faults midturn-kill   # default settings: a worker killed mid-turn (bench/faults/midturn.py)
    python -m bench.faults move-under-faults  # a move with a dead turn and a dead mover
    python -m bench.faults standby-takeover   # the active instance dies, a standby takes over
    python -m bench.faults redis-wipe     # Redis without persistence comes back empty
    python -m bench.faults backup-restore # a host lost, its backup restored on a fresh data dir
    python -m bench.faults SCENARIO --short   # the short form the integration tests run
    python -m bench.faults kill-workers --shards 2   # two shards, one account each (also
                                                     # broker-restart, slow-turns)
    python -m bench.faults kill-workers --network-model   # a network model's layout (also
                                                          # broker-restart, slow-turns)

Scenarios:
  kill-workers    SIGKILL worker main processes and pool children alternately (≥ --kills);
                  a main goes with its pool at once (as in a container crash) twice, then
                  alone (its children finish orphaned), and so on; mains restart after a short
                  pause, `kefu listen` is killed now and then. Each kill follows a burst of the
                  workload's next messages, and a main kill goes to a worker holding a page
                  not ingested yet (Celery task events) when there is one: only then can the
                  broker lose a page.
  broker-restart  SIGKILL redis-server (≥ --kills times) and restart it on the same AOF.
  slow-turns      the openai provider against a fake endpoint that answers each call after
                  2 s, so a turn (≥ 2 calls) outlives the 3 s customer writer lease.
  log-damage      flip a byte in a middle frame of idle customers' session logs, then
                  those customers write again.
  midturn-kill    kefu's default settings and a model taking 3 s per turn: SIGKILL a worker
                  (whole, restarted after 1 s; its pool processes only; or one running as
                  another host, back after 30 s) while it holds a turn waiting for the model;
                  time from each kill to the last reply its waiting buyers got (goals 15 s,
                  15 s and 30 s).
  bad-start       an overwritten store header, schema version 999, openai without endpoint
                  settings, an unknown KEFU_BROKER_URI: each worker and beat must exit
                  non-zero with a KEFU_ code within the bound, consuming nothing.
  move-under-faults
                  kefu's default settings (only data dir, broker and the model's endpoint
                  set), two shards, traffic on shard a's account and a model answering after
                  3 s: (a) SIGKILL the shard-a worker (with its pool) running one of the
                  account's turns and start `kefu accounts move` to b at once, (b) SIGKILL
                  the mover 1 s after it began the move. Nobody reruns it. Pass: move done or rolled back
                  ≤ 60 s after (a), input not left paused, 0 lost, 0 doubled (audited on the
                  store of the shard the account ends on).
  standby-takeover an active instance (workers, beat, `kefu listen`) and a standby (same
                  commands, another KEFU_INSTANCE, same data dir), kefu's DEFAULT leases; with
                  traffic running every process of the active one is SIGKILLed for good.
                  Adds: kill → the standby's grant, kill → its first reply (must be within
                  KEFU_SHARD_LEASE_S + 3 s), buyer messages that waited > 5 s.
  redis-wipe      kefu's default settings (no shortened lease) and a Redis without persistence:
                  the shard's host restarts once (every process, so the store's fence sees
                  grant 2), then Redis is SIGKILLed and comes back empty under traffic (lease,
                  grant counter, directory, journal and queued broker messages gone). Checks
                  grants above the fence, ≤ 2 exits per process, the directory rebuilt, and
                  wipe → last reply ≤ 60 s.
  backup-restore  `kefu backup` under traffic; the traffic goes on; every process of the shard's
                  host is SIGKILLed for good; once its lease lapsed, `kefu restore` puts the
                  backup on a fresh data dir and a new instance serves it (bench/faults/
                  backup_restore.py). Each message is answered exactly once by either host or
                  held for an operator (`kefu restore-gap`); every message after the backup is
                  recovered from the platform; none doubled.

With --network-model the agent is the fake OpenAI-compatible endpoint (kill-workers and
broker-restart: 0.5 s per response, 2 s timeout) and the workers run without -P, on the pool
kefu picks for a network model: one process with a thread pool, its turns inline in the
ingest task. A kill then cuts dozens of turns at once; there are no pool children to kill, so
every kill is a main's.

With --shards 2 each of two shards has its own data dir, account, KEFU_SHARD and KEFU_INSTANCE,
two workers, beat and `kefu listen`, on the one Redis and one simulated platform file; buyers
are split between the two accounts, kills hit both shards' processes (each listener at least
once), and the table adds up both shards' stores.

Any process that exits by itself is restarted (like a compose restart policy) and counted,
with its status and error class. Below the table: broker messages left unacked in Redis (a
killed worker's; Redis hands them out again only after the visibility timeout), the
listener's final state, and what each scenario adds.

The table (one per run):
  offered                  buyer messages the simulated platform holds
  answered exactly once    their batch got exactly one reply, received once by the platform
  lost                     no reply at all, by why: never stored (not in inbound_message),
                           stored, not admitted (no batch), admitted, not answered (a batch,
                           no reply reached the platform); with the state each was left in
                           (a batch's state, or "its reply result-unknown")
  doubled                  answered more than once: a request id the platform received twice,
                           or two different requests sent for one batch
  result-unknown left      outbox requests whose outcome nobody settled
  corrupt session logs     logs whose load raises CorruptSessionLog (torn tails apart;
                           kept-aside damaged copies are not counted)
  last fault → last reply  from the end of the last fault (restart included) to the last
                           reply the platform received
The exit status is 0 only when lost = doubled = 0 (slow-turns: also no corrupt log;
log-damage: every damaged log kept byte for byte and its customer answered; bad-start: every
case exited non-zero with a code; redis-wipe and backup-restore: their checks above). A failed run keeps its folder
(logs, data, AOF) and prints where; --keep keeps a passing one too. Diagnostics never print message bodies or cursors.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.faults.options import SCENARIOS, Options, options_for
from bench.faults.report import RunReport
from bench.faults.rig import Say

__all__ = ["SCENARIOS", "Options", "RunReport", "options_for", "run"]


def _runner(scenario: str) -> Callable[[Options, Path, Say], RunReport]:
    from bench.faults import backup_restore, bad_start, log_damage, midturn, moves, redis_wipe, standby, traffic

    return {
        "kill-workers": traffic.kill_workers,
        "broker-restart": traffic.broker_restart,
        "slow-turns": traffic.slow_turns,
        "log-damage": log_damage.log_damage,
        "bad-start": bad_start.bad_start,
        "midturn-kill": midturn.midturn_kill,
        "move-under-faults": moves.move_under_faults,
        "standby-takeover": standby.standby_takeover,
        "redis-wipe": redis_wipe.redis_wipe,
        "backup-restore": backup_restore.backup_restore,
    }[scenario]


def run(options: Options, say: Say) -> RunReport:
    """Run one scenario in its own folder; the folder goes unless the run failed or is kept."""
    root = options.workdir or Path(tempfile.mkdtemp(prefix=f"kefu-faults-{options.scenario}-"))
    root.mkdir(parents=True, exist_ok=True)
    report: RunReport | None = None
    try:
        report = _runner(options.scenario)(options, root, say)
        return report
    finally:
        keep = options.keep or options.workdir is not None or report is None or not report.passed
        if keep:
            if report is not None:
                report.run_dir = str(root)
            else:
                say(f"run dir kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
