"""How every kefu SQLite file gets its schema: the delivery, memory and coordination stores and
a simulated platform's ledger alike.

A file's schema is an ordered tuple of frozen migrations. Each one runs in one write
transaction together with its `user_version` stamp, so a file is always at exactly one version,
and two processes opening a new file at once do the work once (the second finds the stamp).
A file already at the latest version is only read, never locked for writing. Never edit a
released migration: add the next one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtime.errors import KefuError

if TYPE_CHECKING:  # the connection's module installs the fence, which reads ORDINARY_TABLES here
    from runtime.store.connection import Connection

NEWER_KEFU = "run a newer kefu, or point KEFU_DATA_DIR at another directory"

# The file's own tables, in name order: not SQLite's, and not a full-text index (V32's
# message_search) or the shadow tables it keeps itself. What "every table" means to the
# shard fence, a backup's counts and a move's columns.
ORDINARY_TABLES = (
    "SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'table' AND name NOT LIKE 'sqlite_%'"
    " ORDER BY name"
)


@dataclass(frozen=True)
class Migration:
    version: int
    summary: str
    statements: tuple[str, ...] = ()
    # Work SQL cannot say (a re-index by a new tokenizer), run after the statements, in their transaction.
    step: Callable[[Connection], None] | None = None


def latest(migrations: Sequence[Migration]) -> int:
    return migrations[-1].version


def user_version(conn: Connection) -> int:
    return int(conn.execute("PRAGMA user_version").scalar_one())


def migrate(conn: Connection, migrations: Sequence[Migration], file: str, hint: str = NEWER_KEFU) -> None:
    """Bring the file behind the autocommit `conn` to the latest of `migrations`. A file newer
    than them is left as it is: KEFU_SCHEMA_TOO_NEW names it (`file`, its path and what it is)
    and says what to do (`hint`). A busy file raises the driver's error: the caller decides how
    long to wait for another process's migration."""
    from runtime.store.engine import immediate  # the engine migrates through this module

    current = user_version(conn)
    if current > latest(migrations):
        raise KefuError(
            "KEFU_SCHEMA_TOO_NEW",
            f"{file} has schema version {current}; this kefu understands up to {latest(migrations)}",
            hint,
        )
    for migration in migrations:
        if migration.version <= current:
            continue
        with immediate(conn):
            if user_version(conn) >= migration.version:
                continue  # another process migrated meanwhile
            for statement in migration.statements:
                conn.execute(statement)
            if migration.step is not None:
                migration.step(conn)
            conn.execute(f"PRAGMA user_version = {migration.version}")
