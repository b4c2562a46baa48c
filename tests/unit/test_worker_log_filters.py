"""The worker's log filters (issue 43, item 7): routine housekeeping lines go to debug, a
housekeeping task that did something or any pipeline task stays at info; a task killed by a
whole-group SIGTERM during shutdown is one warning line, no traceback."""

from __future__ import annotations

import logging
import sys

import pytest
from billiard.exceptions import WorkerLostError
from celery.app.trace import LOG_RECEIVED, LOG_SUCCESS
from celery.worker import state

from worker.celery_app import RoutineToDebug, ShutdownToOneLine

HOUSEKEEPING = {"kefu.receipts.alerts", "kefu.placement.drive", "kefu.ingest.rescue"}


def _record(name: str, msg: str, args: object, level: int = logging.INFO, exc_info: object = None) -> logging.LogRecord:
    record = logging.LogRecord(name, level, __file__, 1, msg, None, exc_info)  # type: ignore[arg-type]
    record.args = args  # type: ignore[assignment]  # Celery passes one dict
    return record


def _passes_at_info(record: logging.LogRecord) -> bool:
    logging.getLogger(record.name).setLevel(logging.INFO)
    try:
        return RoutineToDebug(HOUSEKEEPING).filter(record)
    finally:
        logging.getLogger(record.name).setLevel(logging.NOTSET)


@pytest.mark.parametrize(
    ("msg", "task", "result", "kept"),
    [
        (LOG_RECEIVED, "kefu.receipts.alerts", None, False),
        (LOG_SUCCESS, "kefu.receipts.alerts", "0", False),
        (LOG_SUCCESS, "kefu.receipts.alerts", "2", True),
        (LOG_SUCCESS, "kefu.ingest.rescue", "'0 lease(s), 0 stranded turn(s)'", False),
        (LOG_SUCCESS, "kefu.ingest.rescue", "'0 lease(s), 1 stranded turn(s)'", True),
        (LOG_SUCCESS, "kefu.placement.drive", "'no move of this shard\\'s to take'", False),
        (LOG_SUCCESS, "kefu.placement.drive", "'move m1: drained'", True),
        (LOG_RECEIVED, "kefu.ingest.page", None, True),
        (LOG_SUCCESS, "kefu.outbox.deliver", "'0'", True),
    ],
)
def test_routine_lines_go_to_debug(msg, task, result, kept):
    args = {"name": task, "id": "x", "return_value": result, "runtime": 0.01}
    record = _record("celery.app.trace", msg, args)
    assert _passes_at_info(record) is kept
    assert record.levelno == (logging.INFO if kept else logging.DEBUG)


def test_beat_sending_due_goes_to_debug_and_shows_at_debug():
    record = _record("celery.beat", "Scheduler: Sending due task %s (%s)", ("alerts", "kefu.receipts.alerts"))
    assert not _passes_at_info(record)
    logging.getLogger("celery.beat").setLevel(logging.DEBUG)
    try:
        again = _record("celery.beat", "Scheduler: Sending due task %s (%s)", ("alerts", "kefu.receipts.alerts"))
        assert RoutineToDebug(HOUSEKEEPING).filter(again) and again.levelno == logging.DEBUG
    finally:
        logging.getLogger("celery.beat").setLevel(logging.NOTSET)


def _lost() -> tuple:  # type: ignore[type-arg]
    try:
        raise WorkerLostError("Worker exited prematurely: signal 15 (SIGTERM) Job: 0.")
    except WorkerLostError:
        return sys.exc_info()


def test_a_task_lost_to_a_warm_shutdown_is_one_line(monkeypatch):
    monkeypatch.setattr(state, "should_stop", 0)  # EX_OK: Celery's warm shutdown
    exc_info = _lost()
    record = _record("celery.worker.request", "Task handler raised error: %r", (exc_info[1],), logging.ERROR, exc_info)
    assert ShutdownToOneLine().filter(record)
    assert "Traceback" not in record.getMessage()
    assert record.exc_info is None and record.levelno == logging.WARNING
    assert "KEFU_TASK_INTERRUPTED" in record.getMessage() and "WorkerLostError" in record.getMessage()


def test_a_task_lost_while_running_keeps_its_traceback(monkeypatch):
    monkeypatch.setattr(state, "should_stop", None)
    monkeypatch.setattr(state, "should_terminate", None)
    record = _record("celery.worker.request", "Task handler raised error: %r", None, logging.ERROR, _lost())
    assert ShutdownToOneLine().filter(record)
    assert record.exc_info is not None and record.levelno == logging.ERROR


def test_log_routine_tasks_keeps_every_line_at_info():
    """KEFU_LOG_ROUTINE_TASKS: no task is housekeeping and beat's lines stay at info."""
    routine = RoutineToDebug(set(), beat=False)
    sending = _record("celery.beat", "Scheduler: Sending due task %s (%s)", ("alerts", "kefu.receipts.alerts"))
    idle = _record("celery.app.trace", LOG_SUCCESS, {"name": "kefu.receipts.alerts", "id": "x", "return_value": "0"})
    assert routine.filter(sending) and sending.levelno == logging.INFO
    assert routine.filter(idle) and idle.levelno == logging.INFO
