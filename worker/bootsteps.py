"""`celery -A worker worker --listen`: run the account listeners inside the worker process."""

from __future__ import annotations

from typing import Any

from celery import Celery, bootsteps
from click import Option

from worker.listeners import ListenerSupervisor, build_supervisor

LISTEN_OPTION = Option(
    ("--listen",), is_flag=True, default=False, help="Also run the platform listeners of every live account."
)


class ListenerStep(bootsteps.StartStopStep):
    """Starts after the pool (no listener thread exists when pool processes fork), stops with
    the worker: shutdown closes every connection."""

    label = "kefu listeners"
    requires = ("celery.worker.components:Pool",)

    def __init__(self, parent: Any, listen: bool = False, **options: Any) -> None:
        super().__init__(parent, **options)
        self.enabled = bool(listen)

    def create(self, parent: Any) -> ListenerSupervisor:
        return build_supervisor(parent.app)


def install(app: Celery) -> None:
    app.user_options["worker"].add(LISTEN_OPTION)
    app.steps["worker"].add(ListenerStep)
