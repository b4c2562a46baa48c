"""The agent session log (SPEC 2, 3.7): append-only JSON lines in independent zstd frames.

Every flush writes one self-contained frame and fsyncs, so a crash can only tear the last
frame. A reader stops at the first frame that does not decode completely and reports it as
torn; the single writer truncates it before appending, so torn bytes are never merged.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

import zstandard
from pydantic import BaseModel, ConfigDict, Field

EventType = Literal[
    "turn/start",
    "turn/end",
    "step/start",
    "step/end",
    "system/message",
    "user/message",
    "assistant/message",
    "assistant/attempt",
    "tool/call",
    "tool/result",
    "im/message-read",
]


class SessionEvent(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    seq: int = Field(ge=0, strict=True)  # position: 0..N-1, contiguous
    type: EventType
    at: int = Field(ge=0)  # ms since epoch


class CorruptSessionLog(Exception):
    pass


def read_frames(data: bytes) -> tuple[list[bytes], int]:
    """Split concatenated zstd frames. Returns (complete frame payloads, bytes they span)."""
    payloads: list[bytes] = []
    good = 0
    while good < len(data):
        decompressor = zstandard.ZstdDecompressor().decompressobj()
        try:
            payload = decompressor.decompress(data[good:])
        except zstandard.ZstdError:
            break
        if not decompressor.eof:
            break  # torn: the frame ends before its end mark
        payloads.append(payload)
        good = len(data) - len(decompressor.unused_data)
    return payloads, good


class SessionLog:
    """One session's log. Only the holder of the session's writer lease may append."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.events: list[SessionEvent] = []
        self.torn_bytes = 0
        self._pending: list[SessionEvent] = []
        self._compressor = zstandard.ZstdCompressor(level=3, write_checksum=True, write_content_size=True)

    @property
    def offset(self) -> int:
        """Count of events (durable and buffered): the next seq."""
        return len(self.events) + len(self._pending)

    @property
    def all_events(self) -> list[SessionEvent]:
        """Durable events followed by buffered ones."""
        return self.events + self._pending

    def load(self) -> list[SessionEvent]:
        data = self.path.read_bytes() if self.path.exists() else b""
        payloads, good = read_frames(data)
        self.torn_bytes = len(data) - good
        events: list[SessionEvent] = []
        for payload in payloads:
            for line in payload.splitlines():
                event = SessionEvent.model_validate_json(line)
                if event.seq != len(events):
                    raise CorruptSessionLog(f"{self.path}: seq {event.seq} where {len(events)} was expected")
                events.append(event)
        self.events = events
        return events

    def open_for_append(self) -> list[SessionEvent]:
        """Load, and drop a torn last frame so new frames never follow garbage."""
        events = self.load()
        if self.torn_bytes:
            with open(self.path, "r+b") as handle:
                handle.truncate(self.path.stat().st_size - self.torn_bytes)
                os.fsync(handle.fileno())
            self.torn_bytes = 0
        return events

    def append(self, type: EventType, **data: Any) -> SessionEvent:
        from runtime.store import now_ms

        event = SessionEvent(seq=self.offset, type=type, at=now_ms(), **data)
        self._pending.append(event)
        return event

    def flush(self) -> bool:
        """Write buffered events as one frame and fsync. True if anything was made durable."""
        if not self._pending:
            return False
        body = "".join(json.dumps(e.model_dump(), ensure_ascii=False) + "\n" for e in self._pending).encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as handle:
            handle.write(self._compressor.compress(body))
            handle.flush()
            os.fsync(handle.fileno())
        self.events.extend(self._pending)
        self._pending.clear()
        return True
