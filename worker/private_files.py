"""kefu's files hold its buyers' words and its shops' secrets: only its own user may read them.

Every kefu process (a worker, beat, `kefu`) creates its files and folders with umask 077 (files
0600, folders 0700), whatever umask it was started with: the stores and their WAL files (SQLite
gives those the database's mode), session logs, the embedded broker's queue files, media, the
simulator's database. What an older kefu left open is reported when a worker or beat starts.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

PRIVATE_UMASK = 0o077
log = logging.getLogger(__name__)


def make_private() -> None:
    """From now on, what this process creates is its user's alone (a stricter umask is kept)."""
    os.umask(os.umask(PRIVATE_UMASK) | PRIVATE_UMASK)


def open_to_others(data_dir: Path) -> list[Path]:
    """The data dir, and the files and folders under it, that other users may read, write or
    enter (links are not followed)."""
    if not data_dir.exists():
        return []
    found = [data_dir] if data_dir.stat().st_mode & PRIVATE_UMASK else []
    for root, folders, files in os.walk(data_dir):
        for name in (*folders, *files):
            path = Path(root, name)
            try:
                if path.lstat().st_mode & PRIVATE_UMASK and not path.is_symlink():
                    found.append(path)
            except FileNotFoundError:  # removed meanwhile (a broker file taken)
                continue
    return found


def warn_if_open(data_dir: Path) -> None:
    """Report, once at startup, what under the data dir other users can read."""
    found = open_to_others(data_dir)
    if found:
        log.warning(
            "kefu: KEFU_DATA_DIR_OPEN: %d files or folders under %s are open to other users (e.g. %s), made"
            " before kefu kept its files private: run `chmod -R go-rwx %s`",
            len(found),
            data_dir,
            found[0],
            data_dir,
        )
