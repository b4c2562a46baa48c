"""`kefu memory selfcheck`: whether the memory store is whole, and where it needs a look.

The self-check reads the file with a reader of its own (a connection that writes nothing, its
own SQL, zstd and tokenizer calls), not through MemoryStore, so a bug in the store's code cannot
hide the damage it made. FAIL is damage (the index against the folders, folder states and value
ranges, plans against their folders, recall states against the folders they name, image
files) or a scorer that stopped (over 20% of a customer's folders waiting past its delay).
WARN is what works but needs a look (source §7): a smaller scoring backlog, recall whose lane
guarantees bent (register drops, degraded rounds), a model that scores every memory alike,
session logs that name plans or folders the store lacks. Only FAIL makes the command exit 1.
"""

from __future__ import annotations

import json
import marshal
from array import array
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import zstandard
from pydantic import BaseModel
from sqlalchemy.exc import DatabaseError

from runtime.agent.session_log import CorruptSessionLog, MemoryArchive, MemoryRecall, SessionLog
from runtime.memory.report import read_only
from runtime.memory.store import keyword_terms, sqlite_reason
from runtime.memory.tokenize import tokens
from runtime.store.clock import now_ms
from runtime.store.connection import Connection

SOURCES = {"pending", "llm", "heuristic"}
STALE_PENDING_MS = 600_000  # KEFU_MEMORY__HEURISTIC_AFTER_S's default: the heuristic scores what waits longer
BACKLOG_WARN_SHARE, BACKLOG_WARN_COUNT, BACKLOG_FAIL_SHARE = 0.05, 20, 0.20  # source §7's pending check
SPREAD_MIN_SCORED = 20  # a model's scores compared once a customer has this many


class Check(BaseModel):
    name: str
    status: Literal["PASS", "WARN", "FAIL"]
    detail: str = ""


def _pairs(packed: bytes, width: int) -> list[tuple[int, ...]]:
    values = array("I")
    values.frombytes(packed)
    return sorted(tuple(values[i : i + width]) for i in range(0, len(values), width))


def _postings_problems(db: Connection, decompress: Callable[[bytes], bytes]) -> list[str]:
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


def selfcheck(path: Path, sessions_dir: Path | None = None, stale_after_ms: int = STALE_PENDING_MS) -> list[Check]:
    """Every check of the store; with `sessions_dir`, the session logs against it too. Pending
    folders older than `stale_after_ms` are ones the scorer should have taken already."""
    try:
        checks = _selfcheck(path)
    except (DatabaseError, zstandard.ZstdError, UnicodeDecodeError, ValueError) as error:
        return [Check(name="readable memory store", status="FAIL", detail=_failure(error))]
    looks: list[tuple[str, Callable[[Connection], Check]]] = [
        ("scoring backlog", lambda db: _pending_backlog(db, stale_after_ms)),
        ("recall fairness", _recall_fairness),
        ("score spread", _score_spread),
    ]
    if sessions_dir is not None:
        looks.append(("session logs", lambda db: _session_logs(db, sessions_dir)))
    with read_only(path) as db:
        for name, look in looks:  # one that cannot finish fails alone; the others still report
            try:
                checks.append(look(db))
            except (DatabaseError, OSError, ValueError) as error:
                checks.append(Check(name=name, status="FAIL", detail=_failure(error)))
    return checks


def _failure(error: Exception) -> str:
    reason = sqlite_reason(error)  # SQLite's own words, as "DatabaseError: file is not a database"
    return f"{type(reason).__name__}: {reason}"


def _selfcheck(path: Path) -> list[Check]:
    decompress = zstandard.ZstdDecompressor().decompress
    checks: list[Check] = []

    def check(name: str, problems: list[str]) -> None:
        checks.append(_verdict(name, [], failures=problems))

    with read_only(path) as db:
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


def _verdict(name: str, warnings: list[str], info: str = "", failures: list[str] | None = None) -> Check:
    problems = failures or warnings
    shown = "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")
    status: Literal["PASS", "WARN", "FAIL"] = "FAIL" if failures else "WARN" if warnings else "PASS"
    return Check(name=name, status=status, detail="; ".join(part for part in (shown, info) if part))


def _pending_backlog(db: Connection, stale_after_ms: int) -> Check:
    """Pending folders the scorer left past its delay: more than 5% (and 20) warns, more than
    20% of a customer's 20 or more folders fails (the scorer is not running)."""
    before = now_ms() - stale_after_ms
    rows = db.execute(
        "SELECT scope, COUNT(*), SUM(scored = 0 AND created_at < ?) FROM folder GROUP BY scope", (before,)
    ).fetchall()
    warnings, failures = [], []
    for scope, folders, stale in rows:
        line = f"{scope}: {stale}/{folders} pending past the scorer's delay"
        if folders >= BACKLOG_WARN_COUNT and stale > BACKLOG_FAIL_SHARE * folders:
            failures.append(line)
        elif stale > BACKLOG_WARN_COUNT and stale > BACKLOG_WARN_SHARE * folders:
            warnings.append(line)
    total = sum(r[2] for r in rows)
    return _verdict("scoring backlog", warnings, f"{total} stale pending in {len(rows)} customers", failures)


def _recall_fairness(db: Connection) -> Check:
    """The lanes' counters from every recall state, and the picks per lane from telemetry."""
    counters: Counter[str] = Counter()
    for (state,) in db.execute("SELECT state FROM recall_state"):
        try:
            counters.update(json.loads(state).get("counters", {}))
        except (ValueError, AttributeError, TypeError):
            continue  # an unreadable state fails "recall states"
    lanes: Counter[str] = Counter()
    for (data,) in db.execute("SELECT data FROM telemetry WHERE type = 'recall'"):
        lanes.update(json.loads(data).get("lanes", {}))
    warnings = [
        f"{name.replace('_', ' ')} {counters[name]}" for name in ("register_drops", "degraded") if counters[name]
    ]
    info = "lanes " + ", ".join(f"{lane} {n}" for lane, n in sorted(lanes.items()) if n) if lanes else "no recall yet"
    info += f"; re-injections {counters['re_injections']}"
    return _verdict("recall fairness", warnings, info)


def _score_spread(db: Connection) -> Check:
    """A model that gives every memory of a customer the same alpha or beta is not judging
    them: recall order and trust rules then say nothing (the heuristic's constant beta aside)."""
    rows = db.execute(
        "SELECT scope, COUNT(*), COUNT(DISTINCT alpha), COUNT(DISTINCT beta) FROM folder"
        " WHERE scored = 1 AND score_source = 'llm' GROUP BY scope"
    ).fetchall()
    warnings = []
    for scope, scored, alphas, betas in rows:
        if scored >= SPREAD_MIN_SCORED and (alphas == 1 or betas == 1):
            same = " and ".join(name for name, n in (("alpha", alphas), ("beta", betas)) if n == 1)
            warnings.append(f"{scope}: all {scored} model-scored memories have the same {same}")
    return _verdict("score spread", warnings)


def _session_logs(db: Connection, sessions_dir: Path) -> Check:
    """Each session's archive events against the store's plans, and its recall block against
    the store's folders: a store restored from an older backup, or memory erased under a live
    session. A log that does not read is the agent's to quarantine; it warns here."""
    plans = {row[0] for row in db.execute("SELECT plan_id FROM archive_plan")}
    folders = {row[0] for row in db.execute("SELECT id FROM folder")}
    paths = sorted(sessions_dir.glob("*.jsonl.zst")) if sessions_dir.is_dir() else []
    warnings = [] if paths else [f"no session logs in {sessions_dir}"]
    for path in paths:
        log = SessionLog(path)
        try:
            log.load()
        except CorruptSessionLog:
            warnings.append(f"{path.name}: does not read (damaged)")
            continue
        archives = [e for e in log.of_type("memory/archive") if isinstance(e, MemoryArchive)]
        warnings += [f"{path.name}: archive {e.plan_id} not in the store" for e in archives if e.plan_id not in plans]
        last = log.last("memory/recall")
        block = [entry["folder_id"] for entry in last.entries] if isinstance(last, MemoryRecall) else []
        warnings += [f"{path.name}: recall block names missing {i}" for i in block if i not in folders]
    return _verdict("session logs", warnings, f"{len(paths)} session logs")
