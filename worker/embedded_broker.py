"""The embedded broker: kombu's filesystem transport, with atomic files.

kombu's own transport creates a file and then writes it, both for messages (`_put`) and for
an exchange's binding table (`_queue_bind`), so a reader in between gets an empty file and
the worker dies on the JSON error. Here both are written aside and renamed into place, so a
reader only ever sees complete files.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.transport.filesystem import LOCK_EX, exchange_queue_t, lock, unlock
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

SCHEME = "kefu-filesystem"


FOLDER_OPTIONS = ("data_folder_in", "data_folder_out", "processed_folder", "control_folder", "staging_folder")


class Channel(filesystem.Channel):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """The broker's folders are made when a process first connects, not when kefu is imported:
        `kefu --help` in an empty folder leaves nothing behind."""
        super().__init__(*args, **kwargs)
        for option in FOLDER_OPTIONS:
            Path(self.transport_options[option]).mkdir(parents=True, exist_ok=True)

    # kombu's own filesystem.Channel already renames AbstractChannel._put's `message` to `payload`:
    # no signature matches both, and this one matches the method it replaces.
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        # Same name format as kombu's, so ordering and queue matching are unchanged.
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        staging = os.path.join(self.transport_options["staging_folder"], name)
        try:
            with open(staging, "wb") as handle:
                handle.write(str_to_bytes(dumps(payload)))
            os.replace(staging, os.path.join(self.data_folder_out, name))
        except OSError as exc:
            raise ChannelError(f"Cannot add message file {name!r} to the queue folder") from exc

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        table = self._exchange_file(exchange)
        self.control_folder.mkdir(exist_ok=True)
        entry = exchange_queue_t(routing_key or "", pattern or "", queue or "")
        try:
            with open(table.parent / f"{table.name}.lock", "a") as guard:
                lock(guard, LOCK_EX)  # one read-modify-write at a time, across processes
                try:
                    queues = self.get_table(exchange)
                    if entry in queues:
                        return
                    staging = table.parent / f".{table.name}.{uuid.uuid4().hex}.tmp"
                    staging.write_bytes(str_to_bytes(dumps([entry, *queues])))
                    os.replace(staging, table)
                finally:
                    unlock(guard)
        except OSError as exc:
            raise ChannelError(f"Cannot bind {queue!r} to exchange {exchange!r}") from exc


class Transport(filesystem.Transport):
    Channel = Channel


TRANSPORT_ALIASES.setdefault(SCHEME, f"{__name__}:Transport")
