"""`kefu memory report` and `selfcheck`: what the memory store holds, and whether it is whole.

The self-check reads the file with a reader of its own (plain sqlite3, read-only, its own
zstd and tokenizer calls), not through MemoryStore, so a bug in the store's code cannot hide
the damage it made. It checks the index against the folders, folder states and value ranges,
plans against their folders, recall states against the folders they name, and image files.
"""

from __future__ import annotations

import json
import marshal
import sqlite3
from array import array
from collections import Counter, defaultdict
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Literal

import zstandard
from pydantic import BaseModel

from runtime.memory.store import MemoryStoreUnreadable, keyword_terms
from runtime.memory.tokenize import tokens

SOURCES = {"pending", "llm", "heuristic"}


class ScopeReport(BaseModel):
    scope: str
    folders: int
    pending: int
    review: int
    heuristic: int
    llm: int
    high_alpha: int  # alpha >= 0.6
    events: int
    archives: int
    recalls: int
    chars: int


def report(path: Path) -> list[ScopeReport]:
    try:
        with _read_only(path) as db:
            rows = db.execute(
                "SELECT scope, COUNT(*), SUM(scored = 0), SUM(review), SUM(score_source = 'heuristic'),"
                " SUM(score_source = 'llm'), SUM(scored = 1 AND alpha >= 0.6), COUNT(DISTINCT event), SUM(chars)"
                " FROM folder GROUP BY scope ORDER BY scope"
            ).fetchall()
            counts = Counter((scope, type) for scope, type in db.execute("SELECT scope, type FROM telemetry"))
    except sqlite3.DatabaseError as error:
        raise MemoryStoreUnreadable(path, error) from None
    return [
        ScopeReport(
            scope=r[0],
            folders=r[1],
            pending=r[2],
            review=r[3],
            heuristic=r[4],
            llm=r[5],
            high_alpha=r[6],
            events=r[7],
            archives=counts[(r[0], "archive")],
            recalls=counts[(r[0], "recall")],
            chars=r[8],
        )
        for r in rows
    ]


class Check(BaseModel):
    name: str
    status: Literal["PASS", "FAIL"]
    detail: str = ""


def _pairs(packed: bytes, width: int) -> list[tuple[int, ...]]:
    values = array("I")
    values.frombytes(packed)
    return sorted(tuple(values[i : i + width]) for i in range(0, len(values), width))


def _postings_problems(db: sqlite3.Connection, decompress: Callable[[bytes], bytes]) -> list[str]:
    """Each scope's stored postings against what its index entries and scores say."""
    problems = []
    for scope, data, keywords in db.execute("SELECT scope, data, keywords FROM scope_postings"):
        text: dict[str, list[tuple[int, ...]]] = defaultdict(list)
        words: dict[str, list[tuple[int, ...]]] = defaultdict(list)
        rows = db.execute(
            "SELECT f.rowid, e.terms, f.scored, f.keywords, f.score_source FROM folder f"
            " JOIN index_entry e ON e.folder_id = f.id WHERE f.scope = ?",
            (scope,),
        )
        for rowid, terms, scored, folder_keywords, source in rows:
            for term, count in json.loads(decompress(terms)).items():
                text[term].append((rowid, count))
            for word in keyword_terms(json.loads(folder_keywords), source) if scored else []:
                words[word].append((rowid,))
        stored = {term: _pairs(packed, 2) for term, packed in marshal.loads(data).items()}
        if stored != {term: sorted(pairs) for term, pairs in text.items()}:
            problems.append(f"{scope}: text postings differ from the index entries")
        stored_words = {
            word: _pairs(packed, 1) for word, packed in marshal.loads(keywords or marshal.dumps({})).items()
        }
        if stored_words != {word: sorted(rows) for word, rows in words.items()}:
            problems.append(f"{scope}: keyword postings differ from the folders' keywords")
    return problems


def _read_only(path: Path) -> closing[sqlite3.Connection]:
    """A read-only connection of the report's and self-check's own."""
    if not Path(path).exists():
        raise FileNotFoundError(f"no memory store at {path}")
    return closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True))


def selfcheck(path: Path) -> list[Check]:
    try:
        return _selfcheck(path)
    except (sqlite3.DatabaseError, zstandard.ZstdError, UnicodeDecodeError, ValueError) as error:
        return [Check(name="readable memory store", status="FAIL", detail=f"{type(error).__name__}: {error}")]


def _selfcheck(path: Path) -> list[Check]:
    decompress = zstandard.ZstdDecompressor().decompress
    checks: list[Check] = []

    def check(name: str, problems: list[str]) -> None:
        shown = "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")
        checks.append(Check(name=name, status="FAIL" if problems else "PASS", detail=shown))

    with _read_only(path) as db:
        folders = db.execute(
            "SELECT f.id, f.scope, f.plan_id, t.body, f.chars, f.alpha, f.beta, f.keywords, f.scored, f.score_source,"
            " f.review, f.event_from, f.event_to FROM folder f LEFT JOIN folder_text t ON t.folder_id = f.id"
        ).fetchall()
        entries = {r[0]: (r[1], r[2]) for r in db.execute("SELECT folder_id, length, terms FROM index_entry")}
        ids = {f[0] for f in folders}
        index_problems = [f"{i}: no folder" for i in entries if i not in ids]
        state_problems, range_problems = [], []
        for fid, _, _, body, chars, alpha, beta, keywords, scored, source, review, start, end in folders:
            if body is None:
                index_problems.append(f"{fid}: no archived text")
                continue
            text = decompress(body).decode()
            terms = Counter(tokens(text))
            entry = entries.get(fid)
            if entry is None:
                index_problems.append(f"{fid}: no index entry")
            elif entry[0] != sum(terms.values()) or json.loads(decompress(entry[1])) != dict(terms):
                index_problems.append(f"{fid}: index entry differs from its text")
            if len(text) != chars:
                range_problems.append(f"{fid}: chars {chars} != {len(text)}")
            words = json.loads(keywords)
            if source not in SOURCES or (scored == 0) != (source == "pending"):
                state_problems.append(f"{fid}: scored={scored} with source {source}")
            elif not scored and (alpha, beta, words, review) != (0, 0, [], 0):
                state_problems.append(f"{fid}: pending but carries scores")
            elif scored and not (0.01 <= alpha <= 1 and -10 <= beta <= 10 and 3 <= len(words) <= 8):
                range_problems.append(f"{fid}: alpha {alpha}, beta {beta}, {len(words)} keywords out of range")
            if start > end:
                range_problems.append(f"{fid}: event range reversed")
        check("index entries match folders", index_problems)
        check("postings match index entries", _postings_problems(db, decompress))
        check("folder states", state_problems)
        check("value ranges", range_problems)
        plan_problems = [
            f"{plan}: {want} planned, {have} stored"
            for plan, want, have in db.execute(
                "SELECT p.plan_id, p.folder_count, COUNT(f.id) FROM archive_plan p LEFT JOIN folder f"
                " ON f.plan_id = p.plan_id GROUP BY p.plan_id"
            )
            if want != have
        ]
        check("plans whole", plan_problems)
        recall_problems = []
        for scope, state in db.execute("SELECT scope, state FROM recall_state"):
            try:
                block = json.loads(state)["block"]
            except (ValueError, KeyError, TypeError):
                recall_problems.append(f"{scope}: unreadable state")
                continue
            recall_problems += [f"{scope}: block names missing {i}" for i in block if i not in ids]
        check("recall states", recall_problems)
        images = db.execute("SELECT folder_id, path FROM folder_image").fetchall()
        check("image files", [f"{fid}: {Path(p).name} missing" for fid, p in images if not Path(p).is_file()])
    return checks
