"""The embedded broker: kombu's filesystem transport, with atomic message files.

kombu's own `_put` creates the message file in the queue folder and then writes it, so a
consumer listing the folder in between reads an empty file, and the worker dies on the
JSON error. Here each message is written in a staging folder and renamed into the queue, so
a consumer only ever sees complete files.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

SCHEME = "kefu-filesystem"


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        # Same name format as kombu's, so ordering and queue matching are unchanged.
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        staging = os.path.join(self.transport_options["staging_folder"], name)
        try:
            with open(staging, "wb") as handle:
                handle.write(str_to_bytes(dumps(payload)))
            os.replace(staging, os.path.join(self.data_folder_out, name))
        except OSError as exc:
            raise ChannelError(f"Cannot add message file {name!r} to the queue folder") from exc


class Transport(filesystem.Transport):
    Channel = Channel


TRANSPORT_ALIASES.setdefault(SCHEME, f"{__name__}:Transport")
