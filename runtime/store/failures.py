"""SQLite failures of a delivery store file (or another of kefu's files) as operator errors
naming the file.

A damaged or foreign file ("file is not a database"), or one kefu cannot open, would otherwise
surface as a raw driver error with no code and no path. A busy file is not damage: tasks retry
on it, so it is left as it is when the store opens.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import sqlalchemy.exc

from runtime.errors import KefuError

BUSY = ("SQLITE_BUSY", "SQLITE_LOCKED")
# The file itself is the problem: damaged, not SQLite at all, or not openable by this user.
DAMAGED = ("SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_CANTOPEN", "SQLITE_IOERR", "SQLITE_PERM", "SQLITE_READONLY")

SQLiteError = sqlite3.DatabaseError | sqlalchemy.exc.DatabaseError


def _driver_error(error: SQLiteError) -> BaseException | None:
    return error.orig if isinstance(error, sqlalchemy.exc.DBAPIError) else error


def is_busy(error: SQLiteError) -> bool:
    return str(getattr(_driver_error(error), "sqlite_errorname", "")).startswith(BUSY)


def store_error(path: Path, error: SQLiteError, delivery: bool = True) -> KefuError | None:
    """A SQLite error of the delivery store (or, `delivery` False, of another of kefu's files:
    memory, coordination, a simulated ledger) as the operator's error naming the file; None for
    any other error (a constraint, a bug): that one stays itself."""
    if is_busy(error):
        code = "KEFU_DELIVERY_SQLITE_BUSY" if delivery else "KEFU_SQLITE_BUSY"
        return KefuError(code, f"{path} stayed locked by another process", "try again in a moment")
    reason = _driver_error(error)
    if not str(getattr(reason, "sqlite_errorname", "")).startswith(DAMAGED):
        return None
    if delivery:
        return KefuError(
            "KEFU_DELIVERY_STORE_UNREADABLE",
            f"{path} cannot be used as a kefu delivery store ({reason})",
            "restore the file from a backup, or point KEFU_DATA_DIR at another directory",
        )
    return KefuError(
        "KEFU_SQLITE_FILE_UNREADABLE",
        f"{path} cannot be used ({reason})",
        "restore the file from a backup, or move it aside for kefu to make a new one",
    )


def unopenable(path: Path, error: OSError) -> KefuError:
    return KefuError(
        "KEFU_DELIVERY_STORE_UNREADABLE",
        f"{path} cannot be opened ({error.strerror or error})",
        "check that KEFU_DATA_DIR is writable by this user",
    )
