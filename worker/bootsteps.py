"""`celery -A worker worker --listen`: run the account listeners inside the worker process."""

from __future__ import annotations

from typing import Any

from celery import Celery, bootsteps
from celery.concurrency.prefork import TaskPool as PreforkPool
from click import Option

from runtime.errors import KefuError
from worker.context import refuse_start
from worker.listeners import ListenerSupervisor, build_supervisor

LISTEN_OPTION = Option(
    ("--listen",), is_flag=True, default=False, help="Also run the platform listeners of every live account."
)


class ListenerStep(bootsteps.StartStopStep):  # type: ignore[misc]  # celery is untyped: the base is Any
    """Starts after the pool and the embedded beat have forked (listeners use SQLite, which must
    not be open across a fork), stops with the worker: shutdown closes every connection."""

    label = "kefu listeners"
    requires = ("celery.worker.components:Pool", "celery.worker.components:Beat")

    def __init__(self, parent: Any, listen: bool = False, **options: Any) -> None:
        super().__init__(parent, **options)
        self.enabled = bool(listen)

    def create(self, parent: Any) -> ListenerSupervisor:
        pool = getattr(parent, "pool_cls", None)
        if isinstance(pool, type) and issubclass(pool, PreforkPool):
            # Listeners use SQLite in this process, which forks replacement pool children.
            refuse_start(
                KefuError(
                    "KEFU_LISTEN_NEEDS_SOLO_OR_THREADS",
                    "--listen runs listeners in the worker's main process, and a prefork pool forks from it",
                    "start this worker with -P solo or -P threads, or run `kefu listen` beside it",
                )
            )
        return build_supervisor(parent.app)


def install(app: Celery) -> None:
    app.user_options["worker"].add(LISTEN_OPTION)
    app.steps["worker"].add(ListenerStep)
