"""The memory store: one SQLite file per shard, folders per customer scope, archived text
compressed with zstandard.

An archive plan commits all of its folders or none, in one transaction keyed by the plan id:
retrying the same plan returns the folders it already made, and a crash leaves either the
whole plan or nothing. Folders start pending (alpha 0, beta 0, no keywords, unscored).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from contextlib import AbstractContextManager
from pathlib import Path

import zstandard
from pydantic import BaseModel

from runtime.memory.folders import PlannedFolder
from runtime.store import immediate, now_ms

SCHEMA = """
CREATE TABLE IF NOT EXISTS archive_plan (
    plan_id TEXT PRIMARY KEY,
    scope TEXT NOT NULL,
    folder_count INTEGER NOT NULL,
    committed_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS folder (
    id TEXT PRIMARY KEY,
    scope TEXT NOT NULL,
    plan_id TEXT NOT NULL REFERENCES archive_plan(plan_id),
    seq INTEGER NOT NULL,
    title TEXT NOT NULL,
    body BLOB NOT NULL,
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
    UNIQUE (plan_id, seq)
);
CREATE INDEX IF NOT EXISTS folder_by_scope ON folder (scope, created_at, id);
CREATE TABLE IF NOT EXISTS recall_state (
    scope TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    saved_at INTEGER NOT NULL
);
"""


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


class MemoryStore:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        with self._connection() as db:
            db.executescript(SCHEMA)

    def _connection(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=10, isolation_level=None)
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA foreign_keys = ON")
            db.row_factory = sqlite3.Row
            self._local.db = db
        return db

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        return immediate(self._connection())

    def commit_archive(self, scope: str, plan_id: str, folders: list[PlannedFolder]) -> list[Folder]:
        """All of the plan's folders, or none; the same plan again returns what it made."""
        compressor = zstandard.ZstdCompressor(level=3)
        with self._write() as db:
            if db.execute("SELECT 1 FROM archive_plan WHERE plan_id = ?", (plan_id,)).fetchone() is None:
                at = now_ms()
                db.execute(
                    "INSERT INTO archive_plan (plan_id, scope, folder_count, committed_at) VALUES (?, ?, ?, ?)",
                    (plan_id, scope, len(folders), at),
                )
                for folder in folders:
                    db.execute(
                        "INSERT INTO folder (id, scope, plan_id, seq, title, body, chars, event_from, event_to,"
                        " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            f"mem-{plan_id}-{folder.seq}",
                            scope,
                            plan_id,
                            folder.seq,
                            folder.title,
                            compressor.compress(folder.text.encode()),
                            len(folder.text),
                            folder.event_from,
                            folder.event_to,
                            at,
                        ),
                    )
            rows = db.execute("SELECT * FROM folder WHERE plan_id = ? ORDER BY seq", (plan_id,)).fetchall()
        return [_folder(row) for row in rows]

    def folders(self, scope: str) -> list[Folder]:
        rows = (
            self._connection()
            .execute("SELECT * FROM folder WHERE scope = ? ORDER BY created_at, id", (scope,))
            .fetchall()
        )
        return [_folder(row) for row in rows]

    def folder(self, folder_id: str) -> Folder | None:
        row = self._connection().execute("SELECT * FROM folder WHERE id = ?", (folder_id,)).fetchone()
        return _folder(row) if row else None

    def events(self, scope: str) -> list[str]:
        """The canonical event labels in use in a scope."""
        rows = self._connection().execute(
            "SELECT DISTINCT event FROM folder WHERE scope = ? AND event IS NOT NULL ORDER BY event", (scope,)
        )
        return [row[0] for row in rows]

    def save_scores(self, scores: list[Score]) -> None:
        """Write a judged batch in one transaction."""
        with self._write() as db:
            for s in scores:
                db.execute(
                    "UPDATE folder SET alpha = ?, beta = ?, keywords = ?, scored = 1, score_source = ?,"
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

    def texts(self, scope: str) -> dict[str, str]:
        """Every folder's archived text in a scope, read in one query."""
        decompress = zstandard.ZstdDecompressor().decompress
        rows = self._connection().execute("SELECT id, body FROM folder WHERE scope = ?", (scope,))
        return {row[0]: decompress(row[1]).decode() for row in rows}

    def text(self, folder_id: str) -> str:
        row = self._connection().execute("SELECT body FROM folder WHERE id = ?", (folder_id,)).fetchone()
        if row is None:
            raise KeyError(folder_id)
        return zstandard.ZstdDecompressor().decompress(row["body"]).decode()


def _folder(row: sqlite3.Row) -> Folder:
    values = {k: row[k] for k in row.keys() if k != "body"}
    return Folder.model_validate(
        {**values, "keywords": json.loads(values["keywords"]), "scored": bool(values["scored"])}
    )
