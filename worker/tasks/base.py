"""What every kefu task shares: acks late (celery_app), takes ids not objects, and one retry
policy for a busy store (config.retries)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Task, shared_task
from celery.exceptions import Reject
from sqlalchemy.exc import OperationalError

from config.retries import TASK_STORE_BUSY
from runtime.placement.shards import ShardLeaseLost


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
