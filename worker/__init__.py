"""kefu's Celery shell: `celery -A worker worker` and `celery -A worker beat` use this app.

The app is built from the settings when first asked for (`worker.app`, as Celery's `-A worker`
does), not when a `worker.*` module is imported: `kefu --help` builds nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from celery import Celery

__all__ = ["app"]


def __getattr__(name: str) -> Celery:
    if name != "app":
        raise AttributeError(f"module 'worker' has no attribute {name!r}")
    from worker.celery_app import app

    return app
