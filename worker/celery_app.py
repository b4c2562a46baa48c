"""The Celery app, configured from kefu settings at import (a bad setting stops startup)."""

from __future__ import annotations

import gc
import logging
import re
import sys

from celery import Celery, current_app
from celery.app.trace import LOG_RECEIVED, LOG_SUCCESS
from celery.concurrency import get_implementation
from celery.concurrency.thread import TaskPool as ThreadPool
from celery.signals import beat_init, worker_init, worker_process_init, worker_ready, worker_shutdown
from kombu import Exchange, Queue

from config import Settings, SettingsError, load_settings
from runtime.errors import KefuError
from runtime.store.leases import lapse_gone_holders
from worker.bootsteps import install as install_listeners
from worker.broker import broker_config
from worker.context import refuse_start, runtime_for
from worker.private_files import make_private, warn_if_open
from worker.queues import FAMILIES, queue_name
from worker.shard_lease import hold_shard, release_shard
from worker.tasks import memory, pipeline, placement, probe  # noqa: F401  (registers the shared tasks on every app)

MOVES_DRIVE_S = 5.0  # beat's pass over the open moves (a drain's retry, a bound's check)
DIRECTORY_INTERVAL_S = 20.0  # a directory lost with Redis is whole again within this (and at each start)
# Threads of a network model's worker beyond its model slots: ingestion, sends and the rest go
# on while every slot waits on the model.
WORKER_THREADS_SPARE = 32


def _shard_queues(shard: str) -> list[Queue]:
    """One direct exchange per queue: a message lands in exactly one queue."""
    names = [queue_name(family, shard) for family in FAMILIES]
    return [Queue(name, Exchange(name, type="direct"), routing_key=name) for name in names]


def rescue_interval_s(settings: Settings) -> float:
    return max(1.0, settings.agent.turn_lease_s / 3)


def _beat_schedule(settings: Settings) -> dict[str, dict[str, object]]:
    rescue_s = rescue_interval_s(settings)
    return {
        "reconcile": {"task": pipeline.reconcile.name, "schedule": settings.reconcile.interval_s},
        # A turn whose holder died goes again within a third of its lease after the lease lapsed.
        "rescue": {
            "task": pipeline.rescue.name,
            "schedule": rescue_s,
            "options": {"expires": rescue_s},
        },
        "checkpoint": {"task": pipeline.checkpoint.name, "schedule": settings.checkpoint.interval_ms / 1000},
        # A round left waiting longer than its interval is superseded by the next one.
        "alerts": {
            "task": pipeline.alerts.name,
            "schedule": settings.alerts.interval_s,
            "options": {"expires": settings.alerts.interval_s},
        },
        "memory-backlog": {"task": memory.score_backlog.name, "schedule": 60.0},
        # Observing routes' input of the day that ended, into memory (runtime.memory.history).
        "memory-observed": {"task": memory.remember_observed.name, "schedule": 3600.0, "options": {"expires": 3600}},
        # The directory comes back by itself after the coordination store lost it (Redis).
        "directory": {
            "task": placement.directory.name,
            "schedule": DIRECTORY_INTERVAL_S,
            "options": {"expires": DIRECTORY_INTERVAL_S},
        },
        "memory-audit": {"task": memory.audit.name, "schedule": 86_400.0, "options": {"expires": 3600}},
        "retention": {
            "task": pipeline.retention.name,
            "schedule": settings.retention.interval_s,
            "options": {"expires": settings.retention.interval_s},
        },
        # Each shard takes its steps of unfinished moves and rolls back those past their bound
        # (runtime.placement.moves.drive): a move finishes without its mover. One read when none is open.
        "moves": {
            "task": placement.drive.name,
            "schedule": MOVES_DRIVE_S,
            "options": {"expires": MOVES_DRIVE_S},
        },
        "read-status": {
            "task": pipeline.read_status.name,
            "schedule": min(max(settings.dingtalk.read_status_interval_s / 2, 0.5), 30.0),
        },
    }


# What a housekeeping task returns when it found nothing to do: every number in it is 0 (a
# count, a summary of counts, a dict of them), or nothing at all.
_IDLE_RESULTS = {"None", "[]", "{}", "", "no move of this shard's to take"}
_NUMBER = re.compile(r"\d+")
_SENDING_DUE = "Scheduler: Sending due task %s (%s)"  # celery.beat's own


def _idle_result(shown: object) -> bool:
    text = str(shown).strip("'\"").replace("\\'", "'")  # a string's repr, unquoted
    numbers = _NUMBER.findall(text)
    return text in _IDLE_RESULTS or (bool(numbers) and all(int(n) == 0 for n in numbers))


class RoutineToDebug(logging.Filter):
    """An idle worker stays quiet at `-l info` (issue 43: some 85 lines a minute before): beat's
    "Sending due task", and the "received" and idle "succeeded" lines of the housekeeping tasks
    beat sends every few seconds, log at debug. A housekeeping task that did something (a
    number in its outcome that is not 0) or failed, and every task of the pipeline, still log
    at info and above. The record is demoted, not dropped: `-l debug` shows it."""

    def __init__(self, housekeeping: set[str], beat: bool = True) -> None:
        super().__init__()
        self.housekeeping = housekeeping
        self.beat = beat

    def _routine(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO:
            return False
        if record.msg == _SENDING_DUE:
            return self.beat
        data = record.args if isinstance(record.args, dict) else {}
        if record.msg not in (LOG_RECEIVED, LOG_SUCCESS) or data.get("name") not in self.housekeeping:
            return False
        return record.msg == LOG_RECEIVED or _idle_result(data.get("return_value"))

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._routine(record):
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


_INTERRUPTED = "kefu: KEFU_TASK_INTERRUPTED: the shutdown stopped a task (%s); its message goes back to its queue"


class ShutdownToOneLine(logging.Filter):
    """A worker stopped as a whole (SIGTERM to its process group: a terminal, systemd) has its
    prefork children killed by the same signal, and Celery logs each as an error, a task that
    was running with a WorkerLostError traceback. While this worker shuts down that is the
    normal case, not a failure: its message goes back to the queue (acks_late,
    reject_on_worker_lost) and the reconciler covers the rest. One line each, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        from celery.worker import state

        stopping = (state.should_stop is not None and state.should_stop is not False) or (
            state.should_terminate is not None and state.should_terminate is not False
        )  # as Celery's maybe_shutdown reads them: 0 (EX_OK) is a warm shutdown
        if not stopping:
            return True
        if record.msg == "Task handler raised error: %r" and record.exc_info:
            record.msg = _INTERRUPTED
            lost = record.args[0] if isinstance(record.args, tuple) and record.args else record.exc_info[1]
            record.args = (type(lost).__name__,)  # WorkerLostError (exc_info holds billiard's wrapper)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info, record.exc_text = None, None
        elif record.msg == "Process %r pid:%r exited with %r":
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def quiet_routine_logs(housekeeping: set[str], beat: bool = True) -> None:
    """Install RoutineToDebug on the loggers Celery writes those lines with (replacing the one of
    an app made before in this process), and ShutdownToOneLine. With KEFU_LOG_ROUTINE_TASKS no
    task is housekeeping and beat's lines stay (`beat` False)."""
    routine = RoutineToDebug(housekeeping, beat)
    for name in ("celery.beat", "celery.worker.strategy", "celery.app.trace"):
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, RoutineToDebug)]:
            logger.removeFilter(old)
        logger.addFilter(routine)
    for name in ("celery.worker.request", "multiprocessing"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, ShutdownToOneLine) for f in logger.filters):
            logger.addFilter(ShutdownToOneLine())


def pool_defaults(settings: Settings, argv: list[str]) -> dict[str, object]:
    """The pool a worker runs when its command line (`argv`) names none.

    The rules agent answers from the process in milliseconds: Celery's default, a prefork pool
    of one process per core. A model behind a network spends seconds per call waiting: a turn
    must not hold a process for that, so such a worker runs a thread pool with a thread for
    every model slot (`KEFU_AGENT__OPENAI__MAX_CONCURRENCY`) and some to spare; one process,
    one store lock queue, one connection pool to the model.

    A pool named on the command line (`-P`, `--pool=`) turns this off: Celery cannot tell
    `-P prefork` from its default and would let a configured pool win over it."""
    named = any(arg.startswith("-P") or arg == "--pool" or arg.startswith("--pool=") for arg in argv)
    if not settings.agent.uses_openai or named:  # no profile's model is behind the network
        return {}
    return {
        "worker_pool": "threads",
        "worker_concurrency": settings.agent.openai.max_concurrency + WORKER_THREADS_SPARE,
    }


def make_app(settings: Settings) -> Celery:
    app = Celery("kefu")
    shard = settings.shard
    app.conf.update(
        **broker_config(settings),
        broker_connection_retry_on_startup=True,
        # kefu's tasks report through SQLite, never through results; only pings keep theirs.
        task_ignore_result=True,
        task_annotations={"celery.ping": {"ignore_result": False}},
        result_expires=300,
        task_serializer="json",
        accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # Flower's live view comes from the worker's events (received, started, succeeded,
        # failed); a task-sent event would add a PUBLISH to every hop for a state it shows anyway.
        worker_send_task_events=True,
        task_send_sent_event=False,
        task_queues=_shard_queues(shard),
        task_default_queue=queue_name("ingest", shard),
        task_default_exchange=queue_name("ingest", shard),
        task_default_routing_key=queue_name("ingest", shard),
        task_routes={f"kefu.{family}.*": {"queue": queue_name(family, shard)} for family in FAMILIES},
        beat_schedule_filename=str(settings.data_dir / f"beat-schedule-{shard}"),
        beat_scheduler="worker.folders_on_use:Schedule",  # makes the data dir when it is first needed
        worker_hijack_root_logger=False,
        **pool_defaults(settings, sys.argv),
    )
    # After the configuration: naming a task object binds the tasks, which read it (acks_late).
    app.conf.beat_schedule = _beat_schedule(settings)
    if not settings.log_routine_tasks:
        quiet_routine_logs({str(entry["task"]) for entry in app.conf.beat_schedule.values()})
    else:
        quiet_routine_logs(set(), beat=False)
    app.kefu_settings = settings
    install_listeners(app)
    return app


@worker_init.connect
@beat_init.connect
def _check_runtime(sender: object, **_: object) -> None:
    """Hold the shard's lease, open the store and load the agent before consuming anything:
    a standby waits here, and bad state stops startup.

    worker_init runs in the worker's main process before its pool, consumer or embedded beat
    exist; beat_init before beat's first tick. An error here must exit the process: a worker
    that said "ready" over a store it cannot open would ack and drop every page."""
    try:
        hold_shard(sender.app.kefu_settings)  # type: ignore[attr-defined]
        runtime_for(sender.app).check()  # type: ignore[attr-defined]
        warn_if_open(sender.app.kefu_settings.data_dir)  # type: ignore[attr-defined]
    except KefuError as error:
        refuse_start(error)
    except Exception as error:  # unforeseen (a bug, a store locked past its budget): still no start
        logging.getLogger(__name__).exception("startup check failed")
        failed = KefuError("KEFU_STARTUP_FAILED", f"the startup check failed ({type(error).__name__})", "see above")
        refuse_start(failed)


@worker_init.connect
def _note_pool(sender: object, **_: object) -> None:
    """Whether this worker runs its tasks on threads (worker.dispatch runs turns inline then)."""
    pool = get_implementation(sender.pool_cls)  # type: ignore[attr-defined]
    sender.app.kefu_thread_pool = isinstance(pool, type) and issubclass(pool, ThreadPool)  # type: ignore[attr-defined]


@worker_process_init.connect
def _lapse_lost_siblings(**_: object) -> None:
    """A pool process that starts most often replaces one that died mid-turn: it lapses that
    one's leases at once, on their host (the requeued task or the rescue beat may reach a
    worker on another host, which cannot see them gone), and the rescue runs their turns.

    The store is closed again: the solo pool sends this signal in the worker's main process,
    which forks the embedded beat afterwards (SQLite must not be open across a fork)."""
    try:
        store = runtime_for(current_app._get_current_object()).store
        lapse_gone_holders(store)
        store.close()
    except Exception as error:  # the rescue beat and the leases' expiry still find them
        logging.getLogger(__name__).warning("lapsing dead holders failed (%s)", type(error).__name__)


@worker_init.connect
@worker_process_init.connect
def _freeze_startup_heap(**_: object) -> None:
    """What startup made (modules, schemas, the runtime: some 200,000 objects) lives as long as
    the process: moved out of the garbage collector's sight, so its full passes walk only what
    tasks made. Each full pass over the startup heap paused a task for about 100 ms, which
    showed as p99 latency. In the prefork parent it also keeps the collector from writing to
    pages the pool processes share with it. Runs after the runtime check (connected after it)."""
    gc.collect()
    gc.freeze()


@worker_ready.connect
def _rescue_at_start(sender: object, **_: object) -> None:
    """A worker that starts (again) runs at once the turns its dead predecessor on this host
    held (their leases lapsed in the startup check) and what it had taken from the broker
    without beginning it (a reconciler pass with no grace): a restart, not the customer
    lease's expiry or the reconciler's grace, paces their recovery. Sent as tasks, which any
    worker may take: this main process forks pool processes and must not hold the store open."""
    try:
        pipeline.rescue.apply_async(expires=60)
        pipeline.reconcile.apply_async(kwargs={"grace_s": 0}, expires=60)
    except Exception as error:  # the broker is down: the rescue beat finds them
        logging.getLogger(__name__).warning("rescue at start not sent (%s)", type(error).__name__)


@worker_shutdown.connect
def _release(**_: object) -> None:
    release_shard()


def _load() -> Settings:
    make_private()  # before anything under the data dir is made (worker.private_files)
    try:
        return load_settings()
    except SettingsError as error:
        print(f"kefu: {error}", file=sys.stderr)
        raise SystemExit(2) from None


app = make_app(_load())
