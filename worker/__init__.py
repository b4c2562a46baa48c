"""kefu's Celery shell: `celery -A worker worker` and `celery -A worker beat` use this app."""

from worker.celery_app import app

__all__ = ["app"]
