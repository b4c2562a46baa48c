"""The agent session log (SPEC 2, 3.7): append-only JSON lines in independent zstd frames.

Every flush writes one self-contained frame and fsyncs, so a crash can only damage the tail:
a last frame that does not decode completely, or (from a foreign or buggy writer) a last line
that is not a whole event. A reader loads up to the last whole event and reports the rest as
torn; the single writer cuts the damage off before appending, so it is never merged.

Damage anywhere before the tail (a bad frame with whole frames after it, a bad event before
the last line, a gap in seq) is corruption: `CorruptSessionLog`, and nothing is cut. Cutting
there would silently delete every event after the damage; instead the customer's session is
retired with its file kept as it is (runtime.agent.sessions).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import weakref
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Generic, Literal, TypeVar, get_args

import zstandard
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, with_config
from typing_extensions import TypedDict

from runtime.store import now_ms
from runtime.store.lru import Lru

log = logging.getLogger(__name__)
T = TypeVar("T")
S = TypeVar("S")

# A position (seq, 0..N-1) and a count (offset, 0..N) are different things; both are exact
# non-negative integers.
Seq = Annotated[int, Field(ge=0, strict=True)]
Offset = Annotated[int, Field(ge=0, strict=True)]
_offset = TypeAdapter(Offset)


# --- the events ------------------------------------------------------------------------------
# One model per event type with exactly that type's fields. An unknown type (a newer version's)
# or a field the type does not have fails validation: `append` raises, and `load` reads the line
# as one that is not a whole event (a torn tail if it is the last line, else CorruptSessionLog).
# A field with a default is one some writers leave out; it stays out of the stored line then
# (`event_line`), so the JSON on disk is what it always was.


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    seq: Seq
    at: int = Field(ge=0)  # ms since epoch


@with_config(ConfigDict(extra="forbid"))
class ToolCallRecord(TypedDict):
    """One tool call the model requested (runtime.ports.ToolCall, as a plain mapping)."""

    id: str
    name: str
    arguments: str


@with_config(ConfigDict(extra="forbid"))
class RecallEntry(TypedDict):
    """One folder of the recall block and the turn that brought it in."""

    folder_id: str
    turn: str


class SystemMessage(_Event):
    type: Literal["system/message"] = "system/message"
    text: str


class TurnStart(_Event):
    type: Literal["turn/start"] = "turn/start"
    turn: str
    batch_id: str
    kind: Literal["batch", "follow-up"]
    follows: str | None = None  # a follow-up's interrupted turn


@with_config(ConfigDict(extra="forbid"))
class ImageRef(TypedDict):
    """A buyer's image a user message carries: its copy in the delivery store's media."""

    sha256: str
    mime: str


class UserMessage(_Event):
    type: Literal["user/message"] = "user/message"
    source: str  # the batch id
    text: str
    images: list[ImageRef] = []  # stored images of the message's lines (its text says `[image]`)


class StepStart(_Event):
    type: Literal["step/start"] = "step/start"
    turn: str
    step: int = Field(ge=0)


class StepEnd(_Event):
    type: Literal["step/end"] = "step/end"
    turn: str
    step: int = Field(ge=0)


class AssistantMessage(_Event):
    type: Literal["assistant/message"] = "assistant/message"
    text: str = ""
    tool_calls: list[ToolCallRecord] = []
    usage: dict[str, Any] | None = None  # the provider's usage and the context use


class AssistantAttempt(_Event):
    """A failed model call (never shown to the model)."""

    type: Literal["assistant/attempt"] = "assistant/attempt"
    attempt: int = Field(ge=1)
    code: str
    status: int | None  # HTTP status, if any
    retry_after_s: float | None = None  # the provider's Retry-After (a rate limit's), if it gave one


class ToolCallStart(_Event):
    """A requested tool call starts (durable before it runs)."""

    type: Literal["tool/call"] = "tool/call"
    call_id: str
    name: str


class ToolResult(_Event):
    type: Literal["tool/result"] = "tool/result"
    call_id: str
    name: str
    content: str
    is_error: bool = False
    request_id: str | None = None  # the outbox request a send registered
    code: str | None = None  # a closer's TOOL_OUTCOME_UNKNOWN or TOOL_NOT_STARTED


class TurnEnd(_Event):
    type: Literal["turn/end"] = "turn/end"
    turn: str
    # forked: a fork's closer of a turn its parent had open at the cut (runtime.agent.rotation)
    outcome: Literal["complete", "interrupted", "error", "forked"]
    reason: Literal["handling-paused", "model-unavailable"] | None = None


class DeveloperMessage(_Event):
    """The tools the model may call changed since the session's last request (a setting changed
    between turns): shown to the model, so it neither calls a tool that is gone nor ignores a
    new one."""

    type: Literal["developer/message"] = "developer/message"
    text: str
    added: list[str] = []
    removed: list[str] = []


class RequestHeader(_Event):
    """What the next model requests are made with: the model and the tools offered. Written when
    it changes (the session's first request, a setting changed), never shown to the model."""

    type: Literal["request/header"] = "request/header"
    model: str
    tools: list[str]


class RequestContext(_Event):
    """One model request's context use as kefu estimated it before the call (the provider's own
    count, when it gives one, is in the reply's usage). For operators; never shown to the model."""

    type: Literal["request/context"] = "request/context"
    step: int = Field(ge=0)
    estimated_tokens: int = Field(ge=0)
    window_tokens: int | None = None


class EndSeed(_Event):
    """Where a session's seed ends: in a fork, right after the events copied from its parent
    (`inherited`); everything after it is the session's own."""

    type: Literal["session/end-seed"] = "session/end-seed"
    inherited: bool
    parent: str | None = None


class MessageRead(_Event):
    """The buyer read one of our messages (SPEC 3.9)."""

    type: Literal["im/message-read"] = "im/message-read"
    request_id: str
    platform_message_id: str
    read_at: int  # ms since epoch, 0 if the platform gives none
    text: str


class MemoryArchive(_Event):
    """Events before `upto` (but the system message) are archived out of the model's view."""

    type: Literal["memory/archive"] = "memory/archive"
    plan_id: str
    upto: Offset
    folders: int = Field(ge=0)
    segments: int = Field(ge=0)  # cumulative over the session
    after_percent: float
    note: str


class MemoryRecall(_Event):
    """The whole recall block: its entries and its text."""

    type: Literal["memory/recall"] = "memory/recall"
    entries: list[RecallEntry]
    text: str


class ExtensionEvent(_Event):
    """An event of a vocabulary this reader does not know (a newer kefu's, a plugin's) whose
    writer marked it `ignorable`: kept in its place, skipped by everything that reads the log.
    An unknown event without that mark is refused (seed 002: required on read), as damage."""

    model_config = ConfigDict(extra="allow", frozen=True)
    type: str
    ignorable: Literal[True]


KnownEvent = Annotated[
    SystemMessage
    | TurnStart
    | UserMessage
    | StepStart
    | StepEnd
    | AssistantMessage
    | AssistantAttempt
    | ToolCallStart
    | ToolResult
    | TurnEnd
    | DeveloperMessage
    | RequestHeader
    | RequestContext
    | EndSeed
    | MessageRead
    | MemoryArchive
    | MemoryRecall,
    Field(discriminator="type"),
]
SessionEvent = KnownEvent | ExtensionEvent
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
    "developer/message",
    "request/header",
    "request/context",
    "session/end-seed",
    "im/message-read",
    "memory/archive",
    "memory/recall",
]
SESSION_EVENT: TypeAdapter[KnownEvent] = TypeAdapter(KnownEvent)  # what kefu writes
_KNOWN_TYPES = frozenset(get_args(EventType))


def parse_event(line: bytes) -> SessionEvent:
    """One line of the log; ValidationError unless it is a whole event kefu knows, or an
    ignorable extension event (checked second, so the usual line costs one validation)."""
    try:
        return SESSION_EVENT.validate_json(line)
    except ValidationError:
        try:
            extension = ExtensionEvent.model_validate_json(line)
        except ValidationError:
            extension = None
        if extension is None or extension.type in _KNOWN_TYPES:  # a damaged known event stays damage
            raise
        return extension


@dataclass
class _Turns:
    starts: dict[str, list[TurnStart]] = field(default_factory=dict)  # batch id -> its turns' starts
    outcomes: dict[str, str] = field(default_factory=dict)  # turn -> outcome

    def take(self, event: SessionEvent) -> None:
        if isinstance(event, TurnStart):
            self.starts.setdefault(event.batch_id, []).append(event)
        elif isinstance(event, TurnEnd):
            self.outcomes[event.turn] = event.outcome


def batch_turns(log: SessionLog, batch_id: str) -> list[tuple[TurnStart, str | None]]:
    """(turn/start, outcome or None) of every turn the log holds for a batch, oldest first."""
    return log.folded(
        "turns",
        _Turns,
        _Turns.take,
        lambda turns: [(start, turns.outcomes.get(start.turn)) for start in turns.starts.get(batch_id, ())],
    )


def own_from(log: SessionLog) -> int:
    """The seq a session's own events begin at: after a fork's copy of its parent's prefix (its
    inherited end-seed marker), else 0. Rounds and notes of a fork count only its own."""
    marker = next((e for e in log.of_type("session/end-seed") if isinstance(e, EndSeed) and e.inherited), None)
    return marker.seq + 1 if marker is not None else 0


def write_log(path: Path, events: Sequence[SessionEvent]) -> None:
    """A new session log holding `events` (a fork's seed), whole or not at all: written beside
    it, synced, then renamed into place (a stale file of that name is replaced)."""
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    body = "".join(map(event_line, events)).encode()
    frame = zstandard.ZstdCompressor(level=3, write_checksum=True, write_content_size=True).compress(body)
    _append_durably(partial, frame)
    os.replace(partial, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def event_line(event: SessionEvent) -> str:
    """The event's line in the log: seq, type and at, then the fields its writer gave."""
    fields = event.model_dump(exclude_unset=True, exclude={"seq", "type", "at"})
    return json.dumps({"seq": event.seq, "type": event.type, "at": event.at, **fields}, ensure_ascii=False) + "\n"


class CorruptSessionLog(Exception):
    """Damage before the tail of a session log. The message names the file and where, never
    any of its content."""


_FRAME_MAGIC = b"\x28\xb5\x2f\xfd"


def read_frames(data: bytes) -> list[tuple[int, int, bytes]]:
    """Split concatenated zstd frames: (start, end, payload) of each complete frame."""
    frames: list[tuple[int, int, bytes]] = []
    start = 0
    while start < len(data):
        decompressor = zstandard.ZstdDecompressor().decompressobj()
        try:
            payload = decompressor.decompress(data[start:])
        except zstandard.ZstdError:
            break
        if not decompressor.eof:
            break  # torn: the frame ends before its end mark
        end = len(data) - len(decompressor.unused_data)
        frames.append((start, end, payload))
        start = end
    return frames


def whole_frame_after(data: bytes, start: int) -> int | None:
    """Where a complete, valid frame begins after `start`, if any: a torn last frame has none
    after it, damage in the middle of the file does."""
    position = data.find(_FRAME_MAGIC, start + 1)
    while position != -1:
        decompressor = zstandard.ZstdDecompressor().decompressobj()
        try:
            decompressor.decompress(data[position:])
            if decompressor.eof:
                return position
        except zstandard.ZstdError:
            pass
        position = data.find(_FRAME_MAGIC, position + 1)
    return None


@dataclass(frozen=True)
class _Prefix:
    """A log file's bytes up to its last whole event, as their length and CRC-32 (what tells a
    reader that another writer only appended), and the file's stat after this process last
    wrote or read it (what tells it that nobody did: then it reads nothing)."""

    size: int = 0
    crc: int = 0
    stat: tuple[int, int, int] | None = None  # (inode, size, mtime ns) with exactly these bytes

    def then(self, data: bytes, stat: os.stat_result | None = None) -> _Prefix:
        """The prefix with `data` appended, and the file's stat when it holds no more."""
        size = self.size + len(data)
        known = _stat_key(stat) if stat is not None and stat.st_size == size else None
        return _Prefix(size, zlib.crc32(data, self.crc), known)


def _stat_key(stat: os.stat_result) -> tuple[int, int, int]:
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


@dataclass
class _Parsed:
    """A log file's known prefix, and the events it holds, indexed by type, with what was
    derived from them (SessionLog.derived). The lists are append-only: a snapshot shares them
    with the log that made it (its `owner`) and keeps their lengths at that moment."""

    prefix: _Prefix
    events: list[SessionEvent]
    by_type: dict[str, list[SessionEvent]]
    derived: dict[str, list[Any]] = field(default_factory=dict)
    lengths: dict[str, int] = field(default_factory=dict)  # of each type's list, at the snapshot
    count: int = 0  # of events, at the snapshot
    owner: weakref.ref[SessionLog] | None = None  # the log that appends to the lists

    def snapshot(self, owner: SessionLog) -> _Parsed:
        lengths = {type: len(events) for type, events in self.by_type.items()}
        return _Parsed(
            self.prefix, self.events, dict(self.by_type), self.derived, lengths, len(self.events), weakref.ref(owner)
        )

    def for_log(self, log: SessionLog) -> _Parsed:
        """Of a snapshot: its lists, for `log` to append to, when no other log that may still
        append to them is alive (the usual case: a turn's log is gone when the next turn
        loads), cut back to the snapshot (what a log that ended without flushing left in them),
        so a load costs nothing per event; else a copy."""
        with _owners:
            owner = self.owner() if self.owner is not None else None
            if owner is not None and owner is not log:
                return self.copy()
            self.owner = weakref.ref(log)
        del self.events[self.count :]
        for type, length in self.lengths.items():
            del self.by_type[type][length:]
        for values in list(self.derived.values()):
            del values[self.count :]
        return _Parsed(self.prefix, self.events, dict(self.by_type), self.derived)

    def copy(self) -> _Parsed:
        """Of a snapshot: lists of its own, as they were at the snapshot. Derived values are by
        seq, so those of its events are good whenever they were derived (the snapshot shares
        the log's `derived`, to keep what is derived after it)."""
        return _Parsed(
            self.prefix,
            self.events[: self.count],
            {type: events[: self.lengths[type]] for type, events in self.by_type.items() if type in self.lengths},
            {name: values[: self.count] for name, values in list(self.derived.items())},
        )


class _ParsedCache:
    """What this process last read or wrote of each log, so a turn reads nothing when the file
    is as this process left it, only the frames added since when another process appended (a
    customer's turns move between workers), and never decodes and validates the whole history
    again. A file whose known prefix changed is read whole, so damage anywhere is still found.
    Bounded by bytes and events, least recently used out.
    Locked: a worker uses it from one thread, the console from many."""

    def __init__(self, max_bytes: int = 32 << 20, max_events: int = 50_000) -> None:
        self.max_bytes, self.max_events = max_bytes, max_events
        self._entries: OrderedDict[Path, _Parsed] = OrderedDict()
        self._bytes = self._events = 0
        self._lock = threading.Lock()

    def get(self, path: Path) -> _Parsed | None:
        with self._lock:
            entry = self._entries.get(path)
            if entry is not None:
                self._entries.move_to_end(path)
            return entry

    def put(self, path: Path, entry: _Parsed) -> None:
        with self._lock:
            self._drop(path)
            if not entry.count:
                return  # nothing to keep: an empty or missing log is read in no time
            self._entries[path] = entry
            self._bytes += entry.prefix.size
            self._events += entry.count
            while len(self._entries) > 1 and (self._bytes > self.max_bytes or self._events > self.max_events):
                self._drop(next(iter(self._entries)))

    def drop(self, path: Path) -> None:
        with self._lock:
            self._drop(path)

    def _drop(self, path: Path) -> None:
        entry = self._entries.pop(path, None)
        if entry is not None:
            self._bytes -= entry.prefix.size
            self._events -= entry.count


_parsed = _ParsedCache()
_owners = threading.Lock()  # held while a log takes a snapshot's lists (_Parsed.for_log)


@dataclass
class _Folding(Generic[S]):
    """A fold's state (SessionLog.folded) over a log's first `upto` events; `tail` is the last
    of them, to know the log they were folded from."""

    state: S
    upto: int = 0
    tail: SessionEvent | None = None


_folds: Lru[tuple[Path, str], _Folding[Any]] = Lru(2048)  # each log's folds, by file and name


class SessionLog:
    """One session's log. Only the holder of the session's writer lease may append."""

    def __init__(self, path: Path, guard: Callable[[], AbstractContextManager[object]] = nullcontext) -> None:
        self.path = Path(path)
        # Held around every write to the file: the writer lease's fence (runtime.store.leases), so a
        # holder that lost its lease writes nothing.
        self._guard = guard
        self.events: list[SessionEvent] = []
        self.torn_bytes = 0
        self._damage_at = 0
        self._salvaged: list[SessionEvent] = []
        self._pending: list[SessionEvent] = []
        self._by_type: dict[str, list[SessionEvent]] = {}
        self._derived: dict[str, list[Any]] = {}
        self._prefix = _Prefix()  # of the file's bytes up to its last whole event, as this log read or wrote them
        self._compressor = zstandard.ZstdCompressor(level=3, write_checksum=True, write_content_size=True)

    @property
    def offset(self) -> int:
        """Count of events (durable and buffered): the next seq."""
        return len(self.events) + len(self._pending)

    def since(self, offset: int) -> list[SessionEvent]:
        """Durable events after the first `offset` (a count: 0 gives all, len gives none)."""
        count = _offset.validate_python(offset)
        if count > len(self.events):
            raise ValueError(f"offset {count} is past the end of the log ({len(self.events)} events)")
        return self.events[count:]

    @property
    def all_events(self) -> list[SessionEvent]:
        """Durable events followed by buffered ones."""
        return self.events + self._pending

    def event(self, seq: int) -> SessionEvent:
        """The event (durable or buffered) at `seq`."""
        durable = len(self.events)
        return self.events[seq] if seq < durable else self._pending[seq - durable]

    def of_type(self, type: EventType) -> Sequence[SessionEvent]:
        """The events of one type (durable and buffered), oldest first, without a scan."""
        return self._by_type.get(type, ())

    def last(self, type: EventType) -> SessionEvent | None:
        found = self._by_type.get(type)
        return found[-1] if found else None

    def derived(self, name: str, derive: Callable[[SessionEvent], T]) -> list[T]:
        """`derive` of each event (durable and buffered), by seq. Events never change, so each
        is derived once, kept with the log (and, once durable, across loads in this process):
        a turn's cost does not grow with the session's length."""
        values: list[T] = self._derived.setdefault(name, [])
        durable = len(self.events)
        if len(values) < durable:
            values.extend(map(derive, self.events[len(values) :]))
        if len(values) < self.offset:
            values.extend(map(derive, self._pending[len(values) - durable :]))
        return values

    def folded(
        self, name: str, new: Callable[[], S], step: Callable[[S, SessionEvent], None], read: Callable[[S], T]
    ) -> T:
        """`read` of the state that `step` folds the events (durable and buffered) into, from
        `new()`. The state is kept per file in this process with the last event it took, so a
        call folds only the events since: a turn's cost does not grow with the session's length.
        A log whose events are not the ones folded (read whole again, or this log's buffered
        events were never made durable) is folded from its start."""
        key = (self.path, name)
        entry: _Folding[S] | None = _folds.pop(key)  # given back when done: one thread folds into it
        if entry is None or entry.upto > self.offset or (entry.upto and self.event(entry.upto - 1) is not entry.tail):
            entry = _Folding(new())
        for seq in range(entry.upto, self.offset):
            step(entry.state, self.event(seq))
        if self.offset:
            entry.upto, entry.tail = self.offset, self.event(self.offset - 1)
        try:
            return read(entry.state)
        finally:
            _folds.put(key, entry)

    def _index(self, events: Sequence[SessionEvent]) -> None:
        for event in events:
            self._by_type.setdefault(event.type, []).append(event)

    def load(self) -> list[SessionEvent]:
        known = _parsed.get(self.path)
        try:
            with open(self.path, "rb") as handle:
                stat = os.fstat(handle.fileno())
                if known is not None and known.prefix.stat == _stat_key(stat):
                    self._set_loaded(known.for_log(self))  # as this process left it
                    return self.events
                data = handle.read()
        except FileNotFoundError:
            data, stat = b"", None
        size = known.prefix.size if known is not None else 0
        if known is not None and zlib.crc32(data[:size]) == known.prefix.crc and self._load_after(known, data, stat):
            return self.events
        self._load_whole(data, stat)
        if not self.torn_bytes:
            self._remember()
        return self.events

    def _load_after(self, known: _Parsed, data: bytes, stat: os.stat_result | None) -> bool:
        """Take the known prefix as read, then the frames after it; False (nothing changed) when
        what follows is not all whole events, for the whole-file read to judge."""
        rest = data[known.prefix.size :]
        frames = read_frames(rest)
        if (frames[-1][1] if frames else 0) != len(rest):
            return False  # a torn or damaged tail
        known = known.for_log(self)
        events, first_new = known.events, len(known.events)
        for _, _, payload in frames:
            for line in payload.splitlines():
                try:
                    event = parse_event(line)
                except ValidationError:
                    return False
                if event.seq != len(events):
                    return False
                events.append(event)
        self._set_loaded(_Parsed(known.prefix.then(rest, stat), events, known.by_type, known.derived))
        self._index(events[first_new:])
        if frames:
            self._remember()
        return True

    def _set_loaded(self, parsed: _Parsed) -> None:
        self.events, self._pending, self._prefix = parsed.events, [], parsed.prefix
        self.torn_bytes, self._damage_at, self._salvaged = 0, parsed.prefix.size, []
        self._by_type, self._derived = parsed.by_type, parsed.derived

    def _remember(self) -> None:
        """Keep what this log knows of the file (all of it durable: nothing is buffered) for
        the next load here."""
        _parsed.put(self.path, _Parsed(self._prefix, self.events, self._by_type, self._derived).snapshot(self))

    def _load_whole(self, data: bytes, stat: os.stat_result | None) -> None:
        frames = read_frames(data)
        events: list[SessionEvent] = []
        self._damage_at = frames[-1][1] if frames else 0  # where the torn tail starts
        if self._damage_at < len(data) and (later := whole_frame_after(data, self._damage_at)) is not None:
            _parsed.drop(self.path)
            raise CorruptSessionLog(
                f"{self.path}: bytes {self._damage_at}-{later} do not decode and whole frames follow them"
            )
        self._salvaged = []  # whole events of a last frame whose last line is damaged
        for index, (start, _, payload) in enumerate(frames):
            lines = payload.splitlines()
            for position, line in enumerate(lines):
                try:
                    event = parse_event(line)
                except ValidationError as error:
                    if index < len(frames) - 1 or position < len(lines) - 1:
                        _parsed.drop(self.path)
                        raise CorruptSessionLog(f"{self.path}: event {len(events)} is not a whole event") from error
                    self._damage_at = start
                    self._salvaged = events[len(events) - position :]
                    break
                if event.seq != len(events):
                    _parsed.drop(self.path)
                    raise CorruptSessionLog(f"{self.path}: seq {event.seq} where {len(events)} was expected")
                events.append(event)
        salvaged, damage_at = self._salvaged, self._damage_at
        self._set_loaded(_Parsed(_Prefix().then(data[:damage_at], stat), events, {}))
        self._index(events)
        self._salvaged, self._damage_at, self.torn_bytes = salvaged, damage_at, len(data) - damage_at

    def open_for_append(self) -> list[SessionEvent]:
        """Load, then cut a torn tail off (re-writing the whole events of a damaged last frame),
        so new frames never follow garbage."""
        events = self.load()
        if self.torn_bytes:
            log.warning("session log %s: cutting a torn last frame (%d bytes)", self.path.name, self.torn_bytes)
            with self._guard(), open(self.path, "r+b") as handle:
                handle.truncate(self._damage_at)
                if self._salvaged:
                    handle.seek(self._damage_at)
                    handle.write(salvage := self._frame(self._salvaged))
                    self._prefix = self._prefix.then(salvage)
                os.fsync(handle.fileno())
                self._prefix = self._prefix.then(b"", os.fstat(handle.fileno()))
            self.torn_bytes, self._salvaged = 0, []
            self._remember()
        return events

    def _frame(self, events: list[SessionEvent]) -> bytes:
        body = "".join(map(event_line, events)).encode()
        return self._compressor.compress(body)

    def append(self, type: EventType, **data: Any) -> KnownEvent:
        """Buffer one event, validated into its type's model: the caller names the type and
        gives exactly its fields, and may give `at`, a time other than now (a repair's closers)."""
        event = SESSION_EVENT.validate_python({"seq": self.offset, "type": type, "at": now_ms(), **data})
        self._pending.append(event)
        self._index((event,))
        return event

    def flush(self) -> bool:
        """Write buffered events as one frame and fsync. True if anything was made durable."""
        if not self._pending:
            return False
        frame = self._frame(self._pending)
        with self._guard():
            stat = _append_durably(self.path, frame)
        self.events.extend(self._pending)
        self._pending.clear()
        self._prefix = self._prefix.then(frame, stat)
        self._remember()
        return True


def _append_durably(path: Path, data: bytes) -> os.stat_result:
    """Append `data` and sync it (fdatasync: an append's new length is part of what it syncs);
    the file's stat after. A file this creates also gets its directory entry synced, or a power
    loss could take the whole file, with a batch SQLite already counts as held by it."""
    try:
        fd, created = os.open(path, os.O_WRONLY | os.O_APPEND), False
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, created = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666), True
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fdatasync(fd)
        stat = os.fstat(fd)
    finally:
        os.close(fd)
    if created:
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    return stat
