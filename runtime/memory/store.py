"""The memory store: one SQLite file per shard, folders per customer scope, archived text
compressed with zstandard, and each folder's index entry (its term counts) written with it.

An archive plan commits all of its folders or none, in one transaction keyed by the plan id:
retrying the same plan returns the folders it already made, and a crash leaves either the
whole plan or nothing. Folders start pending (alpha 0, beta 0, no keywords, unscored).
Telemetry rows carry counts and ids only, never archived text.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import struct
import threading
import time
from array import array
from collections import Counter
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, NamedTuple

import zstandard
from pydantic import BaseModel
from sqlalchemy.exc import DatabaseError, DBAPIError, OperationalError

from config.retries import MEMORY_STORE_LOCKED
from runtime.errors import KefuError
from runtime.memory.categories import CATEGORY_WORDS
from runtime.memory.folders import PlannedFolder
from runtime.memory.tokenize import tokens
from runtime.store import immediate, now_ms
from runtime.store.connection import Connection, Row, connect
from runtime.store.migrate import Migration, migrate

HEURISTIC = "heuristic"  # the score source of runtime.memory.heuristic
# Migration 1: the tables as of version 4, where a new file starts (migrations 2 to 4 then find
# nothing to do; they bring up files of earlier versions). Frozen: a schema change is the next migration.
TABLES = (
    """CREATE TABLE IF NOT EXISTS archive_plan (
        plan_id TEXT PRIMARY KEY,
        scope TEXT NOT NULL,
        folder_count INTEGER NOT NULL,
        committed_at INTEGER NOT NULL,
        session_id TEXT,  -- where the archived events came from, when they came from a session log
        from_seq INTEGER,
        to_seq INTEGER
    )""",
    """CREATE TABLE IF NOT EXISTS folder (
        id TEXT PRIMARY KEY,
        scope TEXT NOT NULL,
        plan_id TEXT NOT NULL REFERENCES archive_plan(plan_id),
        seq INTEGER NOT NULL,
        title TEXT NOT NULL,
        chars INTEGER NOT NULL,
        event_from INTEGER NOT NULL,
        event_to INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        alpha REAL NOT NULL DEFAULT 0 CHECK (alpha BETWEEN 0 AND 1),
        beta REAL NOT NULL DEFAULT 0 CHECK (beta BETWEEN -10 AND 10),
        keywords TEXT NOT NULL DEFAULT '[]',
        scored INTEGER NOT NULL DEFAULT 0,
        score_source TEXT NOT NULL DEFAULT 'pending',
        event TEXT,
        reason TEXT,
        review INTEGER NOT NULL DEFAULT 0,  -- trimmed from a recall block: its scores want a second look
        extra_terms TEXT NOT NULL DEFAULT '[]',  -- tokens of the title and the event label
        UNIQUE (plan_id, seq)
    )""",
    "CREATE INDEX IF NOT EXISTS folder_by_scope ON folder (scope, created_at, id)",
    """CREATE TABLE IF NOT EXISTS folder_text (  -- apart from the folder rows, so recall scans no text
        folder_id TEXT PRIMARY KEY REFERENCES folder(id),
        body BLOB NOT NULL  -- zstd of the archived text
    )""",
    """CREATE TABLE IF NOT EXISTS index_entry (
        folder_id TEXT PRIMARY KEY REFERENCES folder(id),
        length INTEGER NOT NULL,  -- tokens in the folder's text
        terms BLOB NOT NULL  -- zstd JSON {term: count}
    )""",
    """CREATE TABLE IF NOT EXISTS scope_postings (
        scope TEXT PRIMARY KEY,
        data BLOB NOT NULL,  -- marshal {term: array('I') bytes of (folder rowid, count) pairs}, every folder
        keywords BLOB,  -- marshal {model keyword: array('I') bytes of scored folder rowids}
        extras BLOB,  -- marshal {title or event token: array('I') bytes of scored folder rowids}
        version INTEGER  -- a digest of what recall's index is read from (_stamp_version): its cache's key
    )""",
    """CREATE TABLE IF NOT EXISTS folder_image (
        folder_id TEXT NOT NULL REFERENCES folder(id),
        name TEXT NOT NULL,
        path TEXT NOT NULL,  -- a content-addressed file under the memory images folder
        sha256 TEXT NOT NULL,
        mime TEXT NOT NULL,
        size INTEGER NOT NULL,
        PRIMARY KEY (folder_id, name)
    )""",
    """CREATE TABLE IF NOT EXISTS telemetry (
        id INTEGER PRIMARY KEY,
        scope TEXT NOT NULL,
        type TEXT NOT NULL,
        at INTEGER NOT NULL,
        data TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS recall_state (
        scope TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        saved_at INTEGER NOT NULL
    )""",
)


def _add_postings_version(db: Connection) -> None:
    """The postings' version column, stamped for every scope (a file that has it is left as it is)."""
    if "version" not in {row[1] for row in db.execute("PRAGMA table_info(scope_postings)")}:
        db.execute("ALTER TABLE scope_postings ADD COLUMN version INTEGER")
        for (scope,) in db.execute("SELECT scope FROM scope_postings").fetchall():
            _stamp_version(db, scope)


def _reindex(db: Connection) -> None:
    """Every folder indexed again by the current tokenizer (runtime.memory.tokenize)."""
    _rebuild(db, None)


# The memory store's schema (runtime.store.migrate: each migration in one transaction with its
# user_version stamp; a file at the latest one is only read). A change of the tokenizer is a
# migration too, whose step is `_reindex`: a file indexed by an older one is indexed again.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "archive plans, folders and their texts, the index, images, telemetry, recall states", TABLES),
    Migration(2, "the tokenizer of stems, stopwords and dates (its re-index is migration 4's)"),
    Migration(3, "the postings' version, the key of recall's cache", step=_add_postings_version),
    Migration(4, "Chinese words (jieba) and Chinese dates in the tokenizer", step=_reindex),
)


class Folder(BaseModel):
    id: str
    scope: str
    plan_id: str
    seq: int
    title: str
    chars: int
    event_from: int
    event_to: int
    created_at: int
    alpha: float
    beta: float
    keywords: list[str]
    scored: bool
    score_source: str
    event: str | None = None
    reason: str | None = None
    review: bool = False


FOLDER_COLUMNS = ", ".join(Folder.model_fields)  # what a Folder reads of a folder row: all but extra_terms
_FOLDERS_OF_PLAN = f"SELECT {FOLDER_COLUMNS} FROM folder WHERE plan_id = ? ORDER BY seq"
_FOLDERS_OF_SCOPE = f"SELECT {FOLDER_COLUMNS} FROM folder WHERE scope = ? ORDER BY created_at, id"
_FOLDER = f"SELECT {FOLDER_COLUMNS} FROM folder WHERE id = ?"


class ArchiveSource(BaseModel):
    """The session log range [from_seq, to_seq) a plan archived."""

    session_id: str
    from_seq: int
    to_seq: int


class IndexedFolder(NamedTuple):
    """What recall needs of a scored folder, read for thousands at once (no validation cost)."""

    rowid: int
    id: str
    alpha: float
    beta: float
    created_at: int
    chars: int
    title: str
    event: str | None
    event_from: int
    event_to: int
    length: int  # tokens in the text


class ArchivedImage(BaseModel):
    """An image an archived message carried; its bytes are a file, its text a placeholder."""

    folder_id: str = ""
    name: str
    path: str
    sha256: str
    mime: str
    size: int

    @property
    def exists(self) -> bool:
        return Path(self.path).is_file()


class Score(BaseModel):
    """A folder's judged values, ready to write."""

    folder_id: str
    alpha: float
    beta: float
    keywords: list[str]
    source: str  # llm | heuristic
    event_given: bool = False  # False: leave the folder's event as it is
    event: str | None = None
    reason: str | None = None


class ScopeRows(BaseModel):
    """One scope's stored rows, by table, as a move between shards carries them (no index)."""

    plans: list[dict[str, Any]] = []
    folders: list[dict[str, Any]] = []
    texts: dict[str, bytes] = {}  # folder id -> its stored body (zstd of the text)
    images: list[dict[str, Any]] = []  # folder_image rows
    recall_state: dict[str, Any] | None = None


class FolderCapReached(KefuError):
    """An archive would take one customer's memory past its folder cap."""

    def __init__(self, scope: str, held: int, planned: int, cap: int) -> None:
        super().__init__(
            "KEFU_MEMORY_FOLDER_CAP",
            f"{scope} holds {held} folders; {planned} more would pass the cap of {cap}",
            "raise KEFU_MEMORY__MAX_FOLDERS or erase old memory; the session is not archived meanwhile",
        )


class MemoryStoreUnreadable(KefuError):
    def __init__(self, path: Path, error: Exception) -> None:
        super().__init__(
            "KEFU_MEMORY_STORE_UNREADABLE", f"{path}: {error}", "run `kefu memory selfcheck`; restore it from a backup"
        )


def sqlite_reason(error: Exception) -> Exception:
    """SQLite's own error behind SQLAlchemy's wrapper of it (what an operator is shown)."""
    if isinstance(error, DBAPIError) and isinstance(error.orig, Exception):
        return error.orig
    return error


class MemoryStore:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        try:
            self._migrate()
        except DatabaseError as error:
            raise MemoryStoreUnreadable(self.path, sqlite_reason(error)) from None

    def _migrate(self, wait_s: float = 300.0) -> None:
        """Bring the file to the latest of MIGRATIONS. Processes opening it while another one
        migrates it wait for that one (a re-index can outlast the lock's busy timeout) instead of
        failing, up to `wait_s`."""
        deadline = time.monotonic() + wait_s
        for delay in MEMORY_STORE_LOCKED.waits_s():
            try:
                migrate(self._connection(), MIGRATIONS, f"{self.path} (a memory store)")
                return
            except OperationalError as error:
                if "locked" not in str(sqlite_reason(error)) or time.monotonic() > deadline:
                    raise
                time.sleep(delay)

    def _connection(self) -> Connection:
        """This thread's connection (autocommit: writes are `_write()`'s transactions)."""
        db: Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = connect(self.path, 10.0, {"journal_mode": "WAL", "foreign_keys": "ON"})
        return db

    def close(self) -> None:
        """Close this thread's connection (before a fork: SQLite must never cross one open)."""
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    def _write(self) -> AbstractContextManager[Connection]:
        return immediate(self._connection())

    def commit_archive(
        self,
        scope: str,
        plan_id: str,
        folders: list[PlannedFolder],
        source: ArchiveSource | None = None,
        images: dict[int, list[ArchivedImage]] | None = None,
        max_folders: int | None = None,
    ) -> list[Folder]:
        """All of the plan's folders with their index entries and images (by folder seq), or
        none; the same plan again returns what it made. A new plan that would take the scope
        past `max_folders` raises FolderCapReached and writes nothing."""
        compressor = zstandard.ZstdCompressor(level=3)
        with self._write() as db:
            if db.execute("SELECT 1 FROM archive_plan WHERE plan_id = ?", (plan_id,)).fetchone() is None:
                if max_folders is not None:
                    held = db.execute("SELECT COUNT(*) FROM folder WHERE scope = ?", (scope,)).scalar_one()
                    if held + len(folders) > max_folders:
                        raise FolderCapReached(scope, held, len(folders), max_folders)
                at = now_ms()
                new_terms: list[tuple[int, Counter[str]]] = []
                db.execute(
                    "INSERT INTO archive_plan (plan_id, scope, folder_count, committed_at, session_id, from_seq,"
                    " to_seq) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        plan_id,
                        scope,
                        len(folders),
                        at,
                        *((source.session_id, source.from_seq, source.to_seq) if source else (None, None, None)),
                    ),
                )
                for folder in folders:
                    folder_id = f"mem-{plan_id}-{folder.seq}"
                    inserted = db.execute(
                        "INSERT INTO folder (id, scope, plan_id, seq, title, chars, event_from, event_to,"
                        " created_at, extra_terms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            folder_id,
                            scope,
                            plan_id,
                            folder.seq,
                            folder.title,
                            len(folder.text),
                            folder.event_from,
                            folder.event_to,
                            at,
                            json.dumps(sorted(set(tokens(folder.title))), ensure_ascii=False),
                        ),
                    )
                    db.execute(
                        "INSERT INTO folder_text (folder_id, body) VALUES (?, ?)",
                        (folder_id, compressor.compress(folder.text.encode())),
                    )
                    terms = _write_index_entry(db, folder_id, folder.text, compressor)
                    assert inserted.lastrowid is not None  # set by every successful INSERT
                    new_terms.append((inserted.lastrowid, terms))
                    for image in (images or {}).get(folder.seq, []):
                        db.execute(
                            "INSERT INTO folder_image (folder_id, name, path, sha256, mime, size)"
                            " VALUES (?, ?, ?, ?, ?, ?)",
                            (folder_id, image.name, image.path, image.sha256, image.mime, image.size),
                        )
                _merge_postings(db, scope, new_terms)
            rows = db.execute(_FOLDERS_OF_PLAN, (plan_id,)).fetchall()
        return [_folder(row) for row in rows]

    def session_plans(self, session_id: str) -> list[ArchiveSource]:
        """The ranges of a session log already archived, oldest first."""
        rows = self._connection().execute(
            "SELECT session_id, from_seq, to_seq FROM archive_plan WHERE session_id = ? ORDER BY from_seq",
            (session_id,),
        )
        return [ArchiveSource(session_id=r[0], from_seq=r[1], to_seq=r[2]) for r in rows]

    def plan_size(self, plan_id: str) -> int:
        count: int = (
            self._connection()
            .execute("SELECT folder_count FROM archive_plan WHERE plan_id = ?", (plan_id,))
            .scalar_one()
        )
        return count

    def index_folders(self, scope: str) -> list[IndexedFolder]:
        """The scope's scored folders as recall reads them, in one query."""
        rows = self._connection().execute(
            "SELECT f.rowid, f.id, f.alpha, f.beta, f.created_at, f.chars, f.title, f.event, f.event_from,"
            " f.event_to, e.length FROM folder f JOIN index_entry e ON e.folder_id = f.id"
            " WHERE f.scope = ? AND f.scored = 1",
            (scope,),
        )
        return list(map(IndexedFolder._make, rows))

    def postings(self, scope: str) -> tuple[dict[str, bytes], dict[str, bytes], dict[str, bytes]]:
        """The scope's inverted indexes: text term -> packed (rowid, count) pairs of every
        folder; model keyword and title/event token -> packed rowids of scored folders."""
        row = (
            self._connection()
            .execute("SELECT data, keywords, extras FROM scope_postings WHERE scope = ?", (scope,))
            .fetchone()
        )
        return tuple(marshal.loads(blob) if blob else {} for blob in row) if row else ({}, {}, {})

    def rebuild_index(self, scope: str | None = None) -> int:
        """Rewrite the index entries and postings of a scope (or of every scope) from the
        archived texts."""
        with self._write() as db:
            return _rebuild(db, scope)

    def postings_version(self, scope: str) -> int | None:
        """Changes with every change of the scope's folders or postings (None: not known)."""
        row = self._connection().execute("SELECT version FROM scope_postings WHERE scope = ?", (scope,)).fetchone()
        return row[0] if row else None

    def images(self, scope: str) -> list[ArchivedImage]:
        """A scope's archived images, oldest first."""
        rows = self._connection().execute(
            "SELECT i.* FROM folder_image i JOIN folder f ON f.id = i.folder_id WHERE f.scope = ?"
            " ORDER BY f.created_at, f.id, i.name",
            (scope,),
        )
        return [ArchivedImage.model_validate(row) for row in rows.mappings()]

    def mark_review(self, folder_ids: list[str]) -> None:
        with self._write() as db:
            db.executemany("UPDATE folder SET review = 1 WHERE id = ?", [(i,) for i in folder_ids])

    def record(self, scope: str, type: str, **data: object) -> None:
        """One telemetry row: counts, ids and codes only."""
        with self._write() as db:
            db.execute(
                "INSERT INTO telemetry (scope, type, at, data) VALUES (?, ?, ?, ?)",
                (scope, type, now_ms(), json.dumps(data, ensure_ascii=False, sort_keys=True)),
            )

    def telemetry(self, scope: str, type: str) -> list[dict[str, Any]]:
        """The scope's telemetry rows of one type, oldest first."""
        rows = self._connection().execute(
            "SELECT data FROM telemetry WHERE scope = ? AND type = ? ORDER BY rowid", (scope, type)
        )
        return [json.loads(row[0]) for row in rows]

    def scopes(self) -> list[str]:
        return [r[0] for r in self._connection().execute("SELECT DISTINCT scope FROM folder ORDER BY scope")]

    def pending(self, older_than_ms: int | None = None) -> dict[str, int]:
        """Scopes with folders awaiting a score (unscored, or marked for review), and how many;
        only folders created before `older_than_ms` when given."""
        rows = self._connection().execute(
            "SELECT scope, COUNT(*) FROM folder WHERE (scored = 0 OR review = 1) AND (? IS NULL OR created_at < ?)"
            " GROUP BY scope ORDER BY scope",
            (older_than_ms, older_than_ms),
        )
        return {r[0]: r[1] for r in rows}

    def folders(self, scope: str) -> list[Folder]:
        rows = self._connection().execute(_FOLDERS_OF_SCOPE, (scope,)).fetchall()
        return [_folder(row) for row in rows]

    def folder(self, folder_id: str) -> Folder | None:
        row = self._connection().execute(_FOLDER, (folder_id,)).fetchone()
        return _folder(row) if row else None

    def events(self, scope: str) -> list[str]:
        """The canonical event labels in use in a scope."""
        rows = self._connection().execute(
            "SELECT DISTINCT event FROM folder WHERE scope = ? AND event IS NOT NULL ORDER BY event", (scope,)
        )
        return [row[0] for row in rows]

    def save_scores(self, scope: str, scores: list[Score], kept: Sequence[str] = ()) -> None:
        """Write a judged batch of a scope in one transaction; `kept` folders keep their values and
        leave review."""
        with self._write() as db:
            db.executemany("UPDATE folder SET review = 0 WHERE id = ?", [(i,) for i in kept])
            for s in scores:
                db.execute(
                    "UPDATE folder SET alpha = ?, beta = ?, keywords = ?, scored = 1, review = 0, score_source = ?,"
                    " event = CASE WHEN ? THEN ? ELSE event END, reason = ? WHERE id = ?",
                    (
                        s.alpha,
                        s.beta,
                        json.dumps(s.keywords, ensure_ascii=False),
                        s.source,
                        s.event_given,
                        s.event,
                        s.reason,
                        s.folder_id,
                    ),
                )
                if s.event_given:
                    title = db.execute("SELECT title FROM folder WHERE id = ?", (s.folder_id,)).scalar_one()
                    extra = sorted(set(tokens(f"{title} {s.event or ''}")))
                    db.execute(
                        "UPDATE folder SET extra_terms = ? WHERE id = ?",
                        (json.dumps(extra, ensure_ascii=False), s.folder_id),
                    )
            if scores:
                _refresh_signals(db, scope)

    def save_recall_state(self, scope: str, state: str) -> None:
        """A snapshot (JSON) of the scope's recall state: block, lanes, round."""
        with self._write() as db:
            db.execute(
                "INSERT INTO recall_state (scope, state, saved_at) VALUES (?, ?, ?) ON CONFLICT (scope)"
                " DO UPDATE SET state = excluded.state, saved_at = excluded.saved_at",
                (scope, state, now_ms()),
            )

    def recall_state(self, scope: str) -> str | None:
        row = self._connection().execute("SELECT state FROM recall_state WHERE scope = ?", (scope,)).fetchone()
        return row[0] if row else None

    def text(self, folder_id: str) -> str:
        row = self._connection().execute("SELECT body FROM folder_text WHERE folder_id = ?", (folder_id,)).fetchone()
        if row is None:
            raise KeyError(folder_id)
        return zstandard.ZstdDecompressor().decompress(row[0]).decode()

    # -- moving a scope between shards (runtime.placement.slices) -------------------------------------
    def export_scope(self, scope: str) -> ScopeRows:
        """A scope's rows as a move ships them, read in one snapshot. The index is left out:
        the target rebuilds it from the texts, so a slice never carries derived data."""
        db = self._connection()
        db.execute("BEGIN")
        try:
            plans = db.execute("SELECT * FROM archive_plan WHERE scope = ? ORDER BY rowid", (scope,)).mappings().all()
            folders = db.execute("SELECT * FROM folder WHERE scope = ? ORDER BY rowid", (scope,)).mappings().all()
            texts = db.execute(
                "SELECT t.folder_id, t.body FROM folder_text t JOIN folder f ON f.id = t.folder_id WHERE f.scope = ?",
                (scope,),
            ).fetchall()
            images = (
                db.execute(
                    "SELECT i.* FROM folder_image i JOIN folder f ON f.id = i.folder_id WHERE f.scope = ?", (scope,)
                )
                .mappings()
                .all()
            )
            state = db.execute("SELECT * FROM recall_state WHERE scope = ?", (scope,)).mappings().first()
        finally:
            db.execute("COMMIT")
        return ScopeRows(
            plans=plans, folders=folders, texts={r[0]: r[1] for r in texts}, images=images, recall_state=state
        )

    def import_scope(self, scope: str, rows: ScopeRows) -> int:
        """Make `scope` hold exactly `rows` (one transaction: whatever the scope held is replaced,
        so importing again gives the same scope), then rebuild its index. Rows keep their ids
        and name their columns; a column the schema does not have, or a row of another scope,
        raises ValueError. Returns the folders."""
        scoped = [*rows.plans, *rows.folders, *([rows.recall_state] if rows.recall_state else [])]
        if any(row.get("scope") != scope for row in scoped):
            raise ValueError(f"rows of another scope than {scope!r}")
        with self._write() as db:
            self._delete_scope(db, scope)
            for table, table_rows in (
                ("archive_plan", rows.plans),
                ("folder", rows.folders),
                ("folder_text", [{"folder_id": k, "body": v} for k, v in rows.texts.items()]),
                ("folder_image", rows.images),
                ("recall_state", [rows.recall_state] if rows.recall_state else []),
            ):
                known = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
                for row in table_rows:
                    if not row.keys() <= known:
                        raise ValueError(f"{table}: unknown columns {sorted(row.keys() - known)}")
                    columns = ", ".join(f'"{c}"' for c in row)
                    marks = ", ".join("?" for _ in row)
                    db.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", tuple(row.values()))
        self.rebuild_index(scope)
        return len(rows.folders)

    def delete_scope(self, scope: str) -> int:
        """Remove everything of a scope (its account moved away): folders, texts, index, images'
        rows, recall state and telemetry. Returns the folders removed."""
        with self._write() as db:
            return self._delete_scope(db, scope)

    def erase_scope(self, scope: str) -> int:
        """`delete_scope` for an erasure request: the deleted content is overwritten in the file,
        and the write-ahead log, which still holds it, is emptied."""
        db = self._connection()
        previous = int(db.execute("PRAGMA secure_delete").scalar_one())
        db.execute("PRAGMA secure_delete = ON")
        try:
            removed = self.delete_scope(scope)
        finally:
            db.execute(f"PRAGMA secure_delete = {previous}")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return removed

    @staticmethod
    def _delete_scope(db: Connection, scope: str) -> int:
        of_scope = "folder_id IN (SELECT id FROM folder WHERE scope = ?)"
        for table in ("folder_image", "index_entry", "folder_text"):
            db.execute(f"DELETE FROM {table} WHERE {of_scope}", (scope,))
        removed = db.execute("DELETE FROM folder WHERE scope = ?", (scope,)).rowcount
        for table in ("archive_plan", "scope_postings", "recall_state", "telemetry"):
            db.execute(f"DELETE FROM {table} WHERE scope = ?", (scope,))
        return removed


def _write_index_entry(db: Connection, folder_id: str, text: str, compressor: zstandard.ZstdCompressor) -> Counter[str]:
    terms = Counter(tokens(text))
    db.execute(
        "INSERT INTO index_entry (folder_id, length, terms) VALUES (?, ?, ?) ON CONFLICT (folder_id)"
        " DO UPDATE SET length = excluded.length, terms = excluded.terms",
        (folder_id, sum(terms.values()), compressor.compress(json.dumps(terms, ensure_ascii=False).encode())),
    )
    return terms


def _rebuild(db: Connection, scope: str | None) -> int:
    """Rewrite the index entries and postings of a scope (of every scope: None) from the
    archived texts (inside the caller's transaction). Returns the folders."""
    compressor = zstandard.ZstdCompressor(level=3)
    decompress = zstandard.ZstdDecompressor().decompress
    rows = db.execute(
        "SELECT f.rowid, f.id, f.scope, t.body, f.title, f.event FROM folder f"
        " JOIN folder_text t ON t.folder_id = f.id WHERE ? IS NULL OR f.scope = ? ORDER BY f.rowid",
        (scope, scope),
    ).fetchall()
    db.execute("DELETE FROM scope_postings WHERE ? IS NULL OR scope = ?", (scope, scope))
    by_scope: dict[str, list[tuple[int, Counter[str]]]] = {}
    for rowid, folder_id, folder_scope, body, title, event in rows:
        extra = sorted(set(tokens(f"{title} {event or ''}")))
        db.execute("UPDATE folder SET extra_terms = ? WHERE rowid = ?", (json.dumps(extra), rowid))
        terms = _write_index_entry(db, folder_id, decompress(body).decode(), compressor)
        by_scope.setdefault(folder_scope, []).append((rowid, terms))
    for folder_scope, entries in by_scope.items():
        _merge_postings(db, folder_scope, entries)
        _refresh_signals(db, folder_scope)
    return len(rows)


def _merge_postings(db: Connection, scope: str, entries: list[tuple[int, Counter[str]]]) -> None:
    """Add folders' term counts to the scope's postings snapshot (inside the caller's transaction)."""
    row = db.execute("SELECT data FROM scope_postings WHERE scope = ?", (scope,)).fetchone()
    postings: dict[str, bytes] = marshal.loads(row[0]) if row else {}
    grown: dict[str, array[int]] = {}
    for rowid, terms in entries:
        for term, count in terms.items():
            packed = grown.get(term)
            if packed is None:
                packed = grown[term] = array("I")
                packed.frombytes(postings.get(term, b""))
            packed.extend((rowid, count))
    postings.update({term: packed.tobytes() for term, packed in grown.items()})
    db.execute(
        "INSERT INTO scope_postings (scope, data) VALUES (?, ?) ON CONFLICT (scope) DO UPDATE SET data = excluded.data",
        (scope, marshal.dumps(postings)),
    )
    _stamp_version(db, scope)


def keyword_terms(keywords: list[str], source: str) -> set[str]:
    """What a folder's keywords add to recall, token by token. The heuristic's keywords are the
    text's own words: only its category keyword adds to the text."""
    if source == HEURISTIC:
        keywords = [word for word in keywords if word in CATEGORY_WORDS]
    return {token for word in keywords for token in tokens(word)}


def _refresh_signals(db: Connection, scope: str) -> None:
    """Rewrite the scope's keyword and title/event postings from its scored folders (judging is
    rare and off the recall path; reading them back is one unmarshal)."""
    keywords: dict[str, array[int]] = {}
    extras: dict[str, array[int]] = {}
    rows = db.execute(
        "SELECT rowid, keywords, extra_terms, score_source FROM folder WHERE scope = ? AND scored = 1", (scope,)
    )
    for rowid, words, extra, source in rows:
        for token in keyword_terms(json.loads(words), source):
            keywords.setdefault(token, array("I")).append(rowid)
        for token in json.loads(extra):
            extras.setdefault(token, array("I")).append(rowid)
    packed = [marshal.dumps({k: v.tobytes() for k, v in m.items()}) for m in (keywords, extras)]
    db.execute(
        "INSERT INTO scope_postings (scope, data, keywords, extras) VALUES (?, ?, ?, ?) ON CONFLICT (scope)"
        " DO UPDATE SET keywords = excluded.keywords, extras = excluded.extras",
        (scope, marshal.dumps({}), *packed),
    )
    _stamp_version(db, scope)


def _stamp_version(db: Connection, scope: str) -> None:
    """Set the scope's postings version: a digest of its postings and of its scored folders'
    scores, what changes in the rows recall's index is read from (a folder's other fields are
    set once, when it is archived). A digest, not a counter, so the same rows, e.g. a scope
    imported again, have the same version."""
    digest = hashlib.blake2b(digest_size=8)
    for blob in db.execute("SELECT data, keywords, extras FROM scope_postings WHERE scope = ?", (scope,)).one():
        digest.update(len(blob or b"").to_bytes(8, "little") + (blob or b""))
    rows = db.execute("SELECT rowid, alpha, beta FROM folder WHERE scope = ? AND scored = 1 ORDER BY rowid", (scope,))
    for rowid, alpha, beta in rows:
        digest.update(struct.pack("<qdd", rowid, alpha, beta))
    version = int.from_bytes(digest.digest(), "little", signed=True)
    db.execute("UPDATE scope_postings SET version = ? WHERE scope = ?", (version, scope))


def _folder(row: Row) -> Folder:
    """A folder of a row of FOLDER_COLUMNS."""
    values = dict(zip(Folder.model_fields, row, strict=True))
    return Folder.model_validate(
        {
            **values,
            "keywords": json.loads(values["keywords"]),
            "scored": bool(values["scored"]),
            "review": bool(values["review"]),
        }
    )
