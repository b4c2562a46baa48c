"""Celery's file-backed parts with their folders made when first used, not when the app is
built: importing kefu (`kefu --help`, a test) leaves no folder behind, and a worker or beat makes
what it needs as it starts."""

from __future__ import annotations

from pathlib import Path

from celery.backends.filesystem import FilesystemBackend
from celery.beat import PersistentScheduler


class Schedule(PersistentScheduler):  # type: ignore[misc]  # celery is untyped: the base is Any
    """Celery's persistent beat schedule, its folder (the data dir) made when beat opens it."""

    def setup_schedule(self) -> None:
        Path(self.schedule_filename).parent.mkdir(parents=True, exist_ok=True)
        super().setup_schedule()


class ResultFolder(FilesystemBackend):  # type: ignore[misc]  # celery is untyped: the base is Any
    """Celery's file result backend (pings only), its folder made when first used."""

    def _find_path(self, url: str) -> str:
        path: str = super()._find_path(url)
        Path(path).mkdir(parents=True, exist_ok=True)
        return path
