"""What every kefu task shares: acks late (celery_app), takes ids not objects, and one retry
policy for a busy store (config.retries)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Task, shared_task
from celery.exceptions import Reject
from celery.worker.request import Request
from sqlalchemy.exc import OperationalError

from config.retries import TASK_STORE_BUSY
from runtime.placement.shards import ShardLeaseLost
from worker import health, task_metrics  # noqa: F401  (they connect the worker's signals)

# Beat's periodic tasks (the reconciler, alerts, checkpoints, ...): a few per second and shard,
# nearly all finding nothing to do. They send no task events, so Flower's task list shows the
# pipeline's work, not this housekeeping; one that fails still shows (KefuRequest).
HOUSEKEEPING: dict[str, Any] = {"send_events": False}


class KefuRequest(Request):  # type: ignore[misc]  # Celery's Request is untyped
    """The worker's record of one task message, as it reports it to Flower (task events).

    Its events say where the task came from: the worker's own `task-received` event carries no
    exchange or routing key (only a publisher's `task-sent` does, which kefu does not send: a
    second PUBLISH per hop), so the `task-started` event adds them, from the message. Every
    event names its task: a task that expired in the queue gets a `task-revoked` event with no
    `task-received` before it, and Flower listed it as `None`. A housekeeping task (no events)
    still reports its failure, so a failing beat task is seen."""

    def send_event(self, type: str, **fields: Any) -> None:
        eventer = self._eventer
        if not (eventer and eventer.enabled) or not (self.task.send_events or type == "task-failed"):
            return
        fields.setdefault("name", self.name)
        if type in ("task-started", "task-failed", "task-revoked"):
            info = self.delivery_info or {}
            fields.setdefault("exchange", info.get("exchange"))
            fields.setdefault("routing_key", info.get("routing_key"))
        eventer.send(type, uuid=self.id, **fields)


class KefuTask(Task):  # type: ignore[misc]  # Celery's Task is untyped
    """A locked or busy SQLite file is transient: retry on config.retries.TASK_STORE_BUSY
    instead of failing, because a failed acks_late task is acked and a pushed page would be
    gone with it. Waits that belong to the work itself (a send the platform did not take, a
    throttling hint) are follow-ups with a countdown that the steps return (runtime.pipeline)."""

    autoretry_for = (OperationalError,)
    retry_backoff = int(TASK_STORE_BUSY.first_s)  # Celery doubles it; config.retries names the schedule
    retry_backoff_max = int(TASK_STORE_BUSY.max_s or 0)
    retry_jitter = True
    max_retries = TASK_STORE_BUSY.retries
    Request = KefuRequest

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """A process whose shard lease passed on wrote nothing: the message goes back to the
        queue for the new holder (and this process shuts down: worker.shard_lease)."""
        try:
            return super().__call__(*args, **kwargs)
        except ShardLeaseLost as error:
            raise Reject(str(error), requeue=True) from None


def kefu_task(name: str, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """A bound task of the kefu family `name` names (`kefu.<queue family>.<task>`)."""
    return shared_task(name=name, bind=True, base=KefuTask, **options)  # type: ignore[no-any-return]
