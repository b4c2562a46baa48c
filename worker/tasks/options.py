"""Options every kefu task shares."""

from __future__ import annotations

import sqlite3

from sqlalchemy.exc import OperationalError

# A locked or busy SQLite file is transient: retry with backoff instead of failing, because a
# failed acks_late task is acked and a pushed page would be gone with it.
RETRY_ON_BUSY = {
    "autoretry_for": (sqlite3.OperationalError, OperationalError),
    "retry_backoff": True,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": 20,
}
