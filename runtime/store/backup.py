"""Backups of a shard's record, and their restore (issue 42; SPEC 2 Stores, 3.12 Shards).

A shard's SQLite files are its record: the delivery store, the memory store, its session logs
and its memory images (buyers' and the shop's media are rows of the delivery store). A backup
is a folder mirroring the data dir's layout for one shard, plus `manifest.json` (`Manifest`:
kefu's version, each store's schema version and table counts, every file's sha256, the time
taken), taken online while workers write:

- each SQLite file through SQLite's online backup API in one step, so one read transaction:
  consistent in itself, and writers go on meanwhile (WAL). A stepped copy would restart at
  every commit of another connection and never end under traffic;
- the delivery store first, then the session logs, the memory store, the memory images: kefu
  writes each of these before the delivery store records what it did (a turn logs its events
  before its batch commits; a memory plan commits before the log's archive event; an image's
  file is written before its memory row), so every later copy is at least as new as what the
  earlier ones name. That is the state a crash at the moment of the delivery snapshot leaves,
  which kefu's crash recovery already handles; the other order could name a session event,
  a memory folder or an image that the backup does not hold;
- a session log (append-only zstd frames, runtime.agent.session_log) up to its last whole
  frame: a frame being written is left out, as a reader would leave it out. A log damaged
  before its tail is copied whole, as the evidence it is;
- memory images (content-addressed files) as they are.

A restore refuses a backup it cannot verify before anything is put in place: every checksum,
schema versions this kefu understands, SQLite's integrity check and every table count equal to
the manifest's. It copies into a staging folder inside the data dir, marks the copy as restored
(below), and renames it into place, the delivery store last: a restore that stops before is
completed by running it again, and a shard without its delivery store has no record yet.

The lost host may have answered buyers between the backup and the restore: kefu cannot know.
So a restore holds back, in the copy: input waiting at the backup and batches admitted then
(kept, never admitted again), replies not settled then (result-unknown: never sent blindly,
settled by the platform's receipt or echo, or an operator), and the window itself
(`restore_window`): live input that occurred before the restore and is delivered again after it
is kept and never answered automatically (the trigger of migration V30). And no identifier the
lost host may have given after the backup is given again: new customers' ids skip ahead, and
each customer's agent session continues in a new one (automatic request ids, the platform's
client references, derive from the session and the place in its log). No buyer gets a reply
twice; what was held is listed by `kefu restore-gap` (`gap_report`) for an operator.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import IO, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from sqlalchemy.exc import DatabaseError

from config import Settings
from config.settings import SHARD_NAME
from runtime.agent.session_log import read_frames, whole_frame_after
from runtime.agent.sessions import fsync_folder
from runtime.errors import KefuError, validation_problems
from runtime.memory.store import MIGRATIONS as MEMORY_MIGRATIONS
from runtime.placement.shards import customer_id_base
from runtime.store.clock import now_ms
from runtime.store.connection import Connection, connect
from runtime.store.engine import DeliveryStore, immediate
from runtime.store.failures import store_error
from runtime.store.migrate import ORDINARY_TABLES, latest, user_version
from runtime.store.migrations import LATEST_VERSION
from runtime.store.queries import restore_window as queries

FORMAT: Literal[1] = 1  # of the manifest; a newer one is refused
MANIFEST = "manifest.json"
RESTORED_CODE = "KEFU_RESTORED_SEND_UNKNOWN"  # a reply not settled at the backup
RESTORE_OWNER = "restore"  # the owner of the attempt a restore records for a reply never attempted
STAGING = ".kefu-restore"  # a restore's staging folder in the data dir: .kefu-restore.<shard>.<id>
READY = ".restore-ready.json"  # in a staging folder: verified and marked, only the renames are left
SQLITE_SIDECARS = ("-wal", "-shm", "-journal")
CUSTOMER_ID_GAP = 1_000_000  # customer ids a restore skips: more than a lost host gives between backups
SESSION_GAP = 1000  # session numbers a restore skips: more than a lost host's rotations after a backup
RESTORED_NOTE = (
    "[kefu] 这个会话是从备份恢复的：备份之后与这位顾客的部分消息和回复可能不在这里（已保存的消息可用"
    " im_query_history 查看）。不要重复发送顾客可能已经收到的内容。"
)
SNAPSHOT_BUSY_S = 30.0  # a snapshot waits this long for a writer (only a DELETE-journal store blocks it)
CHUNK = 1 << 20


class FileKind(StrEnum):
    DELIVERY = "delivery"
    MEMORY = "memory"
    SESSION_LOG = "session-log"  # a live session log, copied up to its last whole frame
    SESSION_FILE = "session-file"  # a damaged log kept aside, copied whole
    MEMORY_IMAGE = "memory-image"


class BackupFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    path: str  # relative to the data dir, "/"-separated
    kind: FileKind
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class StoreFacts(BaseModel):
    """A SQLite file of the backup as it was copied: its schema version and every table's rows."""

    model_config = ConfigDict(extra="forbid")
    schema_version: int = Field(ge=0)
    counts: dict[str, int]


class Manifest(BaseModel):
    """What a backup holds, checked whole by a restore before anything is put in place."""

    model_config = ConfigDict(extra="forbid")
    format: Literal[1] = FORMAT
    backup_id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,100}$")
    kefu_version: str
    shard: str = Field(pattern=f"^{SHARD_NAME}$")
    instance: str  # who took it (KEFU_INSTANCE)
    data_dir: str  # the data dir it was taken from (absolute)
    started_at: int  # ms since epoch
    delivery_at: int  # ms: when the delivery store's snapshot began; the gap starts here
    finished_at: int
    took_s: float
    delivery: StoreFacts
    memory: StoreFacts | None = None  # None: the shard had no memory store
    files: list[BackupFile]

    @model_validator(mode="after")
    def _files_of_the_shard(self) -> Manifest:
        """Every file where the shard's files live, once, and the stores' files as the facts say:
        a manifest can never name a place outside the shard's part of the data dir."""
        paths = [f.path for f in self.files]
        if len(set(paths)) != len(paths):
            raise ValueError("a file is listed twice")
        for entry in self.files:
            if not _in_slot(entry, self.shard):
                raise ValueError(f"{entry.path!r} is not a {entry.kind} file of shard {self.shard}")
        kinds = [f.kind for f in self.files]
        if kinds.count(FileKind.DELIVERY) != 1:
            raise ValueError("the delivery store must be listed once")
        if kinds.count(FileKind.MEMORY) != (self.memory is not None):
            raise ValueError("the memory store is listed without its facts, or the other way round")
        return self


def _in_slot(entry: BackupFile, shard: str) -> bool:
    path = PurePosixPath(entry.path)
    if path.is_absolute() or "\\" in entry.path or any(part in ("", ".", "..") for part in entry.path.split("/")):
        return False
    parts = path.parts
    if entry.kind == FileKind.DELIVERY:
        return parts == (f"delivery-{shard}.sqlite",)
    if entry.kind == FileKind.MEMORY:
        return parts == (f"memory-{shard}.sqlite",)
    folder = ("memory-images",) if entry.kind == FileKind.MEMORY_IMAGE else ("sessions",)
    return len(parts) > 2 and parts[:2] == (*folder, shard)


@dataclass(frozen=True)
class ShardFiles:
    """Where one shard's files live under a data dir (named as config.Settings names them)."""

    data_dir: Path
    shard: str
    delivery: Path
    memory: Path
    sessions: Path
    memory_images: Path

    @classmethod
    def of(cls, settings: Settings) -> ShardFiles:
        return cls(
            settings.data_dir,
            settings.shard,
            settings.delivery_path,
            settings.memory_path,
            settings.sessions_dir,
            settings.memory_images_dir,
        )

    @classmethod
    def under(cls, data_dir: Path, shard: str) -> ShardFiles:
        """The files of `shard` under `data_dir` (a backup folder, a staging folder)."""
        return cls.of(Settings.model_construct(data_dir=data_dir, shard=shard))

    def relative(self, path: Path) -> str:
        return path.relative_to(self.data_dir).as_posix()

    def own_paths(self) -> list[Path]:
        """Everything of the shard that a restore would put in place."""
        stores = [p.with_name(p.name + s) for p in (self.delivery, self.memory) for s in ("", *SQLITE_SIDECARS)]
        return [*stores, self.sessions, self.memory_images]


Stage = Literal[
    "delivery", "session-logs", "memory", "memory-images", "manifest", "copied", "verified", "marked", "placed"
]


class Progress(BaseModel):
    """One stage of a backup or a restore, done: for the command's progress lines."""

    stage: Stage
    files: int
    bytes: int
    seconds: float


Report = Callable[[Progress], None]


def _quiet(progress: Progress) -> None:
    return None


# --- taking a backup ----------------------------------------------------------------------------


def take_backup(files: ShardFiles, dest: Path, instance: str, report: Report = _quiet) -> Manifest:
    """A consistent online backup of the shard's stores into `dest` (new, or an empty folder;
    never inside the data dir, which it would be lost with). Written whole or not at all: a
    failure removes what it wrote, and `manifest.json`, last, is what makes it a backup."""
    dest = dest.expanduser().resolve()
    if dest.is_relative_to(files.data_dir.resolve()):
        raise KefuError(
            "KEFU_BACKUP_DEST_IN_DATA_DIR",
            f"{dest} is inside the data dir {files.data_dir}: a backup there is lost with it",
            "name a folder on another disk or host",
        )
    if not files.delivery.is_file():
        raise KefuError(
            "KEFU_BACKUP_NO_STORE",
            f"shard {files.shard!r} has no delivery store at {files.delivery}: nothing to back up",
            "check KEFU_DATA_DIR and --shard",
        )
    created = _fresh_folder(dest)
    try:
        return _write_backup(files, dest, instance, report)
    except BaseException:
        _empty_out(dest, created)
        raise


def _write_backup(files: ShardFiles, dest: Path, instance: str, report: Report) -> Manifest:
    began, started_at = time.monotonic(), now_ms()
    copy = ShardFiles.under(dest, files.shard)
    delivery_at = now_ms()
    step = time.monotonic()
    entry, delivery = _snapshot(files, files.delivery, copy.delivery, FileKind.DELIVERY)
    entries = _done(report, "delivery", [entry], step)
    step = time.monotonic()
    entries += _done(report, "session-logs", _copy_sessions(files, copy, _named_sessions(copy.delivery)), step)
    memory = None
    if files.memory.is_file():
        step = time.monotonic()
        entry, memory = _snapshot(files, files.memory, copy.memory, FileKind.MEMORY)
        entries += _done(report, "memory", [entry], step)
    step = time.monotonic()
    entries += _done(report, "memory-images", _copy_images(files, copy), step)
    manifest = Manifest(
        backup_id=f"{files.shard}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}",
        kefu_version=kefu_version(),
        shard=files.shard,
        instance=instance,
        data_dir=str(files.data_dir),
        started_at=started_at,
        delivery_at=delivery_at,
        finished_at=now_ms(),
        took_s=round(time.monotonic() - began, 3),
        delivery=delivery,
        memory=memory,
        files=entries,
    )
    step = time.monotonic()
    _write_manifest(dest, manifest)
    report(Progress(stage="manifest", files=1, bytes=0, seconds=time.monotonic() - step))
    return manifest


def kefu_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kefu")
    except PackageNotFoundError:
        return "unknown"


def _done(report: Report, stage: Stage, entries: list[BackupFile], began: float) -> list[BackupFile]:
    size = sum(entry.size for entry in entries)
    report(Progress(stage=stage, files=len(entries), bytes=size, seconds=time.monotonic() - began))
    return entries


def _fresh_folder(dest: Path) -> bool:
    """Make sure `dest` is a new or empty folder; True when this made it."""
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise KefuError(
            "KEFU_BACKUP_DEST_NOT_EMPTY",
            f"{dest} is {'not empty' if dest.is_dir() else 'not a folder'}: a backup goes into a new or empty folder",
            "name a new folder for each backup",
        )
    created = not dest.exists()
    dest.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(dest, 0o700)  # a backup holds the shop's credentials and its buyers' messages
    return created


def _empty_out(dest: Path, created: bool) -> None:
    if created:
        shutil.rmtree(dest, ignore_errors=True)
        return
    for path in dest.iterdir():
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


def _snapshot(files: ShardFiles, source: Path, target: Path, kind: FileKind) -> tuple[BackupFile, StoreFacts]:
    """The SQLite file `source` copied by the online backup API in one step (one read
    transaction: consistent, and never restarted by a writer), then made a plain file
    (rollback journal) whose schema version and table counts go into the manifest."""
    delivery = kind == FileKind.DELIVERY
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with _sqlite_errors(source, delivery):
        src = connect(source, SNAPSHOT_BUSY_S, read_only=True)
        try:
            dst = connect(target)
            try:
                with _driver_errors(src, source, delivery):
                    src.dbapi.backup(dst.dbapi)
                dst.execute("PRAGMA journal_mode = DELETE")
                problems = [str(row[0]) for row in dst.execute("PRAGMA quick_check")]
                facts = StoreFacts(schema_version=user_version(dst), counts=table_counts(dst))
            finally:
                dst.close()
        finally:
            src.close()
    if problems != ["ok"]:
        raise KefuError(
            "KEFU_BACKUP_SOURCE_DAMAGED",
            f"the copy of {source} fails SQLite's check ({problems[0]}): the file itself is damaged",
            "keep your last good backup; see docs/recovery.md",
        )
    os.chmod(target, 0o600)
    size, digest = _hash(target)
    return BackupFile(path=files.relative(source), kind=kind, size=size, sha256=digest), facts


@contextmanager
def _sqlite_errors(path: Path, delivery: bool) -> Iterator[None]:
    """A SQLite failure of one of the shard's files as the operator's error naming it."""
    try:
        yield
    except DatabaseError as error:
        known = store_error(path, error, delivery)
        if known is None:
            raise
        raise known from None


@contextmanager
def _driver_errors(conn: Connection, path: Path, delivery: bool) -> Iterator[None]:
    """What the online backup API raises (sqlite3's own errors), as `_sqlite_errors` does."""
    try:
        yield
    except conn.dbapi.DatabaseError as error:
        known = store_error(path, error, delivery)
        if known is None:
            raise
        raise known from None


def table_counts(conn: Connection) -> dict[str, int]:
    """Rows of every table of the file (the manifest's counts, which a restore reads again)."""
    names = [str(name) for (name,) in conn.execute(ORDINARY_TABLES)]
    return {name: int(conn.execute(f'SELECT count(*) FROM "{name}"').scalar_one()) for name in names}


def _named_sessions(delivery: Path) -> set[str]:
    """The sessions the backup's delivery store names (its copy, read after the snapshot)."""
    db = connect(delivery, read_only=True)
    try:
        return {str(name) for (name,) in db.execute(queries.NAMED_SESSIONS)}
    finally:
        db.close()


def _copy_sessions(files: ShardFiles, copy: ShardFiles, named: set[str]) -> list[BackupFile]:
    """The session logs the delivery snapshot names, each up to its last whole frame, and the
    damaged ones kept aside, whole. A log begun after the snapshot is left out: it belongs to a
    customer or a session the backup does not hold (a customer id the restored shard never
    gives again). A half-made file (`.partial`) is no log yet."""
    if not files.sessions.is_dir():
        return []
    entries = []
    for path in sorted(p for p in files.sessions.rglob("*") if p.is_file() and not p.name.endswith(".partial")):
        live = path.parent == files.sessions and path.name.endswith(".jsonl.zst")
        if live and path.name.removesuffix(".jsonl.zst") not in named:
            continue
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue  # retired or erased since it was listed
        if live:
            data = data[: consistent_length(data)]
        target = copy.data_dir / files.relative(path)
        kind = FileKind.SESSION_LOG if live else FileKind.SESSION_FILE
        entries.append(_write_file(target, [data], files.relative(path), kind))
    return entries


def consistent_length(data: bytes) -> int:
    """How much of a session log's bytes to copy: up to its last whole frame, so a frame being
    appended while it was read is left out (as a reader leaves a torn tail out). A log with a
    whole frame after one that does not decode is damaged before its tail: all of it, as the
    evidence the worker keeps aside (runtime.agent.sessions)."""
    frames = read_frames(data)
    end = frames[-1][1] if frames else 0
    if end == len(data) or whole_frame_after(data, end) is None:
        return end
    return len(data)


def _copy_images(files: ShardFiles, copy: ShardFiles) -> list[BackupFile]:
    """Memory images as they are: content-addressed, a file never changes once it is named."""
    if not files.memory_images.is_dir():
        return []
    entries = []
    for path in sorted(p for p in files.memory_images.rglob("*") if p.is_file() and not p.name.endswith(".partial")):
        target = copy.data_dir / files.relative(path)
        try:
            with path.open("rb") as src, _private(target) as out:
                size, digest = _pour(_chunks(src), out)
        except FileNotFoundError:
            continue  # pruned or erased since it was listed
        entries.append(BackupFile(path=files.relative(path), kind=FileKind.MEMORY_IMAGE, size=size, sha256=digest))
    return entries


def _write_file(target: Path, chunks: Iterable[bytes], relative: str, kind: FileKind) -> BackupFile:
    with _private(target) as out:
        size, digest = _pour(chunks, out)
    return BackupFile(path=relative, kind=kind, size=size, sha256=digest)


@contextmanager
def _private(target: Path) -> Iterator[IO[bytes]]:
    """A new file only its owner may read, on disk when the block ends."""
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with os.fdopen(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
        yield out
        out.flush()
        os.fsync(out.fileno())


def _chunks(stream: IO[bytes]) -> Iterator[bytes]:
    while chunk := stream.read(CHUNK):
        yield chunk


def _pour(chunks: Iterable[bytes], out: IO[bytes]) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    for chunk in chunks:
        digest.update(chunk)
        out.write(chunk)
        size += len(chunk)
    return size, digest.hexdigest()


def _hash(path: Path) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as stream:
        for chunk in _chunks(stream):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def _write_manifest(dest: Path, manifest: Manifest) -> None:
    """The manifest, written beside and renamed into place after every folder of the backup is
    on disk: its presence is what makes the folder a backup."""
    for folder, _, _ in os.walk(dest):
        fsync_folder(Path(folder))
    draft = dest / f".{MANIFEST}.partial"
    with _private(draft) as out:
        out.write(manifest.model_dump_json(indent=2).encode())
    os.replace(draft, dest / MANIFEST)
    fsync_folder(dest)


# --- reading and verifying a backup ---------------------------------------------------------------


def read_manifest(src: Path) -> Manifest:
    """The backup's manifest, validated; KEFU_BACKUP_MANIFEST_MISSING or _INVALID otherwise, and
    KEFU_BACKUP_SCHEMA_TOO_NEW for a manifest of a newer format than this kefu reads."""
    path = src / MANIFEST
    if not path.is_file():
        raise KefuError(
            "KEFU_BACKUP_MANIFEST_MISSING",
            f"{src} has no {MANIFEST}: not a kefu backup, or one that never finished",
            "name the folder `kefu backup` wrote; a backup without its manifest cannot be trusted",
        )
    try:
        raw = json.loads(path.read_bytes())
    except (ValueError, OSError) as error:
        problem = f"{path} is not readable JSON ({type(error).__name__})"
        raise KefuError("KEFU_BACKUP_MANIFEST_INVALID", problem, "take a new backup") from None
    if isinstance(raw, dict) and isinstance(raw.get("format"), int) and raw["format"] > FORMAT:
        raise KefuError(
            "KEFU_BACKUP_SCHEMA_TOO_NEW",
            f"{path} has format {raw['format']}; this kefu reads format {FORMAT}",
            "restore it with the kefu version that took it, or a newer one",
        )
    try:
        return Manifest.model_validate(raw)
    except ValidationError as error:
        problems = "; ".join(validation_problems(error, "manifest"))
        raise KefuError("KEFU_BACKUP_MANIFEST_INVALID", f"{path}: {problems}", "take a new backup") from None


def _check_versions(manifest: Manifest) -> None:
    newest = {"delivery store": LATEST_VERSION, "memory store": latest(MEMORY_MIGRATIONS)}
    for what, facts in (("delivery store", manifest.delivery), ("memory store", manifest.memory)):
        if facts is not None and facts.schema_version > newest[what]:
            raise KefuError(
                "KEFU_BACKUP_SCHEMA_TOO_NEW",
                f"the backup's {what} has schema version {facts.schema_version};"
                f" this kefu understands up to {newest[what]}",
                f"restore it with kefu {manifest.kefu_version} (which took it) or a newer one",
            )


def _copy_verified(src: Path, staging: Path, manifest: Manifest) -> tuple[int, int]:
    """Every listed file copied into `staging`, each checked against its size and sha256 as it
    is copied (what is checked is what is restored). Returns (files, bytes)."""
    total = 0
    for entry in manifest.files:
        source = src / entry.path
        if not source.is_file():
            raise KefuError(
                "KEFU_BACKUP_FILE_MISSING",
                f"{source} is listed in the manifest and missing",
                "copy the backup folder again, whole",
            )
        with _private(staging / entry.path) as out, source.open("rb") as stream:
            size, digest = _pour(_chunks(stream), out)
        if (size, digest) != (entry.size, entry.sha256):
            raise KefuError(
                "KEFU_BACKUP_CHECKSUM_MISMATCH",
                f"{source} does not match the manifest's checksum: it changed or was damaged after the backup",
                "restore another backup, or copy this one again from where it was kept",
            )
        total += size
    return len(manifest.files), total


def unlisted_files(src: Path, manifest: Manifest) -> list[str]:
    """Files in the backup folder that the manifest does not name (they are not restored)."""
    listed = {entry.path for entry in manifest.files} | {MANIFEST}
    found = (p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file())
    return sorted(path for path in found if path not in listed)


def _check_store(path: Path, facts: StoreFacts, newest: int, what: str) -> None:
    """The restored copy of a SQLite file is whole and holds what the manifest says."""
    try:
        db = connect(path, read_only=True)
        try:
            version = user_version(db)
            problems = [str(row[0]) for row in db.execute("PRAGMA integrity_check")]
            counts = table_counts(db) if problems == ["ok"] else {}
        finally:
            db.close()
    except DatabaseError as error:
        reason = getattr(error, "orig", error)
        raise KefuError(
            "KEFU_BACKUP_CORRUPT", f"the backup's {what} cannot be read ({reason})", "restore an earlier backup"
        ) from None
    if version > newest:
        raise KefuError(
            "KEFU_BACKUP_SCHEMA_TOO_NEW",
            f"the backup's {what} has schema version {version}; this kefu understands up to {newest}",
            "restore it with a kefu at least as new as the one that took it",
        )
    if problems != ["ok"]:
        raise KefuError(
            "KEFU_BACKUP_CORRUPT",
            f"the backup's {what} fails SQLite's integrity check ({problems[0]})",
            "restore an earlier backup",
        )
    if version != facts.schema_version:
        raise KefuError(
            "KEFU_BACKUP_MANIFEST_MISMATCH",
            f"the backup's {what} has schema version {version}; its manifest says {facts.schema_version}",
            "the manifest belongs to another backup: restore a backup folder as `kefu backup` wrote it",
        )
    names = counts.keys() | facts.counts.keys()
    differing = sorted(name for name in names if counts.get(name) != facts.counts.get(name))
    if differing:
        name = differing[0]
        raise KefuError(
            "KEFU_BACKUP_COUNT_MISMATCH",
            f"the backup's {what} holds {counts.get(name, 0)} rows of {name}; its manifest says"
            f" {facts.counts.get(name, 0)}",
            "the manifest belongs to another backup: restore a backup folder as `kefu backup` wrote it",
        )


# --- restoring ------------------------------------------------------------------------------------


class RestoreResult(BaseModel):
    backup_id: str
    shard: str
    data_dir: str
    backup_at: int  # ms: the backup's delivery snapshot
    restored_at: int  # ms
    window_id: int
    schema_version: int  # of the backup's delivery store (migrated to this kefu's when older)
    files: int
    bytes: int
    inputs_held: int  # waiting input, kept and never admitted
    batches_held: int  # admitted batches, revoked
    sends_unknown: int  # replies not settled, now result-unknown
    took_s: float
    resumed: bool = False  # an interrupted restore completed
    unlisted: list[str] = []  # files in the backup folder the manifest does not name (not restored)


def restore_backup(src: Path, target_dir: Path, report: Report = _quiet) -> RestoreResult:
    """Put the backup in `src` in place as its shard's files under `target_dir`, verified first
    (module docstring). The data dir must hold nothing of the shard (KEFU_RESTORE_TARGET_NOT_EMPTY);
    other shards' files may be there. A restore interrupted while renaming is completed."""
    began = time.monotonic()
    src = src.expanduser().resolve()
    target_dir = target_dir.expanduser().resolve()
    manifest = read_manifest(src)
    _check_versions(manifest)
    source = ShardFiles.under(Path(manifest.data_dir), manifest.shard)
    target = ShardFiles.under(target_dir, manifest.shard)
    resumed = _finish_interrupted(target)
    if resumed is not None:
        return resumed
    _refuse_occupied(target)
    target_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = target_dir / f"{STAGING}.{manifest.shard}.{uuid.uuid4().hex[:8]}"
    staging.mkdir(mode=0o700)
    try:
        result = _stage_restore(src, staging, manifest, source, target, report)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    with _private(staging / READY) as out:
        out.write(result.model_dump_json().encode())
    fsync_folder(staging)
    placed = time.monotonic()
    _place(ShardFiles.under(staging, manifest.shard), target)
    shutil.rmtree(staging, ignore_errors=True)
    report(Progress(stage="placed", files=result.files, bytes=result.bytes, seconds=time.monotonic() - placed))
    result.took_s = round(time.monotonic() - began, 3)
    return result


def _stage_restore(
    src: Path, staging: Path, manifest: Manifest, source: ShardFiles, target: ShardFiles, report: Report
) -> RestoreResult:
    """Copy, verify and mark the backup in `staging`; nothing is in place yet."""
    began = time.monotonic()
    files, size = _copy_verified(src, staging, manifest)
    report(Progress(stage="copied", files=files, bytes=size, seconds=time.monotonic() - began))
    staged = ShardFiles.under(staging, manifest.shard)
    began = time.monotonic()
    _check_store(staged.delivery, manifest.delivery, LATEST_VERSION, "delivery store")
    if manifest.memory is not None:
        _check_store(staged.memory, manifest.memory, latest(MEMORY_MIGRATIONS), "memory store")
    report(Progress(stage="verified", files=files, bytes=size, seconds=time.monotonic() - began))
    began = time.monotonic()
    marks = _mark(staged, manifest, source.data_dir, target.data_dir)
    report(Progress(stage="marked", files=files, bytes=size, seconds=time.monotonic() - began))
    return RestoreResult(
        backup_id=manifest.backup_id,
        shard=manifest.shard,
        data_dir=str(target.data_dir),
        backup_at=manifest.delivery_at,
        restored_at=marks.restored_at,
        window_id=marks.window_id,
        schema_version=manifest.delivery.schema_version,
        files=files,
        bytes=size,
        inputs_held=marks.inputs,
        batches_held=marks.batches,
        sends_unknown=marks.sends,
        took_s=0.0,
        unlisted=unlisted_files(src, manifest),
    )


def _refuse_occupied(target: ShardFiles) -> None:
    for path in target.own_paths():
        if path.exists() and not _empty_folder(path):
            raise KefuError(
                "KEFU_RESTORE_TARGET_NOT_EMPTY",
                f"{path} exists: a restore goes into a data dir that holds nothing of shard {target.shard!r}",
                "restore into a new data dir (--data-dir), or move the shard's files aside first",
            )


def _empty_folder(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


@dataclass(frozen=True)
class _Marks:
    window_id: int
    restored_at: int
    inputs: int
    batches: int
    sends: int


def _mark(staged: ShardFiles, manifest: Manifest, old_dir: Path, new_dir: Path) -> _Marks:
    """In the staged copy: migrated to this kefu's schema (a store open does that anyway), the
    restore's window opened and what it holds back marked, in one transaction; paths into the
    old data dir moved to the new one."""
    store = DeliveryStore(staged.delivery)
    try:
        with store.write(durable=True) as conn:
            restored_at = now_ms()
            params: dict[str, Any] = {
                "b": manifest.backup_id,
                "s": manifest.shard,
                "i": manifest.instance,
                "at": manifest.delivery_at,
                "now": restored_at,
                "code": RESTORED_CODE,
                "owner": RESTORE_OWNER,
            }
            params["w"] = window = int(conn.execute(queries.OPEN, params).scalar_one())
            sends = conn.execute(queries.HOLD_SENDS, params).rowcount
            for statement in (queries.END_STARTED_ATTEMPTS, queries.ADD_UNKNOWN_ATTEMPTS, queries.SENDS_UNKNOWN):
                conn.execute(statement, params)
            batches = conn.execute(queries.HOLD_BATCHES, params).rowcount
            conn.execute(queries.SUPPRESS_BATCH_LINES, params)
            conn.execute(queries.REVOKE_BATCHES, params)
            inputs = conn.execute(queries.HOLD_INPUT, params).rowcount
            conn.execute(queries.SUPPRESS_INPUT, params)
            conn.execute(queries.SKIP_CUSTOMER_IDS, {"base": customer_id_base(manifest.shard), "gap": CUSTOMER_ID_GAP})
            _continue_sessions(conn, staged.sessions, restored_at)
            relocate_paths(conn, old_dir, new_dir)
    finally:
        store.close()
    if staged.memory.is_file():
        memory = connect(staged.memory)
        try:
            with immediate(memory):
                relocate_paths(memory, old_dir, new_dir)
        finally:
            memory.close()
    return _Marks(window, restored_at, inputs, batches, sends)


def _continue_sessions(conn: Connection, sessions_dir: Path, restored_at: int) -> int:
    """Each customer's agent session continues in a new one, numbered SESSION_GAP past their
    highest: a fork holding the whole old log (closed where the copy cut a turn off) and a note
    for the model that messages after the backup may be missing. Automatic request ids derive
    from the session, the turn's place in its log and the model's call id; the old log may have
    grown on the lost host after it was copied, so continuing it would derive ids the lost host
    already sent under (a platform keeps them as client references: an echo or a receipt query
    would settle the wrong reply). A customer without a session gets their first one's number
    reserved likewise. Returns the sessions begun. Inside the restore's transaction; the logs
    are written into the staging folder."""
    from runtime.agent.rotation import fork_seed
    from runtime.agent.session_log import SESSION_EVENT, CorruptSessionLog, SessionLog, write_log
    from runtime.agent.sessions import begin_session, next_session_id, session_header, session_path
    from runtime.store.states import RotationReason, SessionOrigin
    from runtime.store.tables import SessionHeader

    begun = 0
    for customer_id, current in conn.execute(queries.CUSTOMER_SESSIONS).all():
        following = int(next_session_id(conn, customer_id).rpartition("-")[2])
        parent = session_header(conn, current) if current is not None else None
        header = SessionHeader(
            id=f"s{customer_id}-{following - 1 + SESSION_GAP}",
            customer_id=customer_id,
            created_at=restored_at,
            model=parent.model if parent else None,
            origin=SessionOrigin.FIRST if current is None else SessionOrigin.FORKED,
            reason=None if current is None else RotationReason.FORK,
            parent=current,
            profile=parent.profile if parent else None,
        )
        try:
            events = SessionLog(session_path(sessions_dir, current)).load() if current is not None else []
        except CorruptSessionLog:
            events = []  # the old log stays as it is; the new session starts empty
        if events:
            seed = fork_seed(events, current)
            note = {"seq": len(seed), "type": "developer/message", "at": restored_at, "text": RESTORED_NOTE}
            write_log(session_path(sessions_dir, header.id), [*seed, SESSION_EVENT.validate_python(note)])
            header = header.model_copy(update={"inherited": len(events)})
        begun += begin_session(conn, header, current)
    return begun


def relocate_paths(conn: Connection, old_dir: Path, new_dir: Path) -> int:
    """Paths into the old data dir (a damaged log kept aside, a memory image), wherever a column
    holds one (named `path` or `…_path`), made paths into the new one. Returns rows changed."""
    if old_dir == new_dir:
        return 0
    old, new = str(old_dir) + os.sep, str(new_dir) + os.sep
    changed = 0
    for table in [str(r[0]) for r in conn.execute(ORDINARY_TABLES)]:
        for column in (str(r[1]) for r in conn.execute(f'PRAGMA table_info("{table}")')):
            if column == "path" or column.endswith("_path"):
                changed += conn.execute(
                    f'UPDATE "{table}" SET "{column}" = :new || substr("{column}", length(:old) + 1)'
                    f' WHERE substr("{column}", 1, length(:old)) = :old',
                    {"old": old, "new": new},
                ).rowcount
    return changed


def _sidecars_first(source: Path, target: Path) -> list[tuple[Path, Path]]:
    """A SQLite file's journal and shared-memory files before the file: it never appears in
    place without the changes its write-ahead log may still hold."""
    pairs = [(source.with_name(source.name + s), target.with_name(target.name + s)) for s in SQLITE_SIDECARS]
    return [*pairs, (source, target)]


def _place(staged: ShardFiles, target: ShardFiles) -> None:
    """Rename the staged files into place, the delivery store last: until it is there, the
    shard has no record, and running the restore again completes it (`_finish_interrupted`).
    Each rename is atomic; one already done (an earlier run's) is skipped."""
    pairs = [
        (staged.memory_images, target.memory_images),
        (staged.sessions, target.sessions),
        *_sidecars_first(staged.memory, target.memory),
        *_sidecars_first(staged.delivery, target.delivery),
    ]
    for source, destination in pairs:
        if not source.exists():
            continue
        if destination.exists() and not _empty_folder(destination):
            raise KefuError(
                "KEFU_RESTORE_TARGET_NOT_EMPTY",
                f"{destination} appeared while the restore was putting the shard in place",
                "stop whatever writes the data dir (a worker started too early?), move the file aside, and run"
                " the restore again",
            )
        destination.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.rename(source, destination)
        fsync_folder(destination.parent)


def _finish_interrupted(target: ShardFiles) -> RestoreResult | None:
    """A restore of this shard that stopped after it was verified and marked (its staging folder
    says READY) is completed; one that stopped before is removed (nothing of it was in place)."""
    if not target.data_dir.is_dir():
        return None
    for staging in sorted(target.data_dir.glob(f"{STAGING}.{target.shard}.*")):
        ready = staging / READY
        if not ready.is_file():
            shutil.rmtree(staging, ignore_errors=True)
            continue
        result = RestoreResult.model_validate_json(ready.read_bytes())
        _place(ShardFiles.under(staging, target.shard), target)
        shutil.rmtree(staging, ignore_errors=True)
        return result.model_copy(update={"resumed": True})
    return None


# --- what a restore held back -----------------------------------------------------------------------


class RestoreWindow(BaseModel):
    id: int
    backup_id: str
    shard: str
    source_instance: str
    backup_at: int  # ms
    restored_at: int  # ms


class HeldConversation(BaseModel):
    customer_id: int
    account_id: str | None
    conversation_id: str | None
    inputs: int  # lines waiting at the backup
    batches: int  # batches admitted at the backup, revoked
    sends: int  # replies not settled at the backup, made result-unknown
    gap: int  # lines of the window delivered again after the restore


class GapReport(BaseModel):
    """Every restore of the store, and what the latest one held back for an operator."""

    windows: list[RestoreWindow]
    held: list[HeldConversation]


def gap_report(store: DeliveryStore) -> GapReport:
    with store.read() as conn:
        windows = [RestoreWindow.model_validate(row) for row in conn.execute(queries.WINDOWS).mappings()]
        if not windows:
            return GapReport(windows=[], held=[])
        rows = conn.execute(queries.HELD_BY_CONVERSATION, {"w": windows[-1].id}).all()
    fields = list(HeldConversation.model_fields)
    return GapReport(
        windows=windows,
        held=[HeldConversation.model_validate(dict(zip(fields, row, strict=True))) for row in rows],
    )


def held_lines(store: DeliveryStore, window_id: int) -> set[tuple[str, str, str]]:
    """(account, conversation, platform message id) of every buyer line the window held."""
    with store.read() as conn:
        return {(str(a), str(c), str(m)) for a, c, m in conn.execute(queries.HELD_LINES, {"w": window_id})}
