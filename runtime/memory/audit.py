"""`kefu memory audit`: what in the memory store needs upkeep, per customer, and the upkeep.

Read-only by default (source §7's memory-audit): it counts, it does not change. `apply` does
only what is idempotent and safe beside live turns (at worst a turn's recall state save races
the prune and one lane step repeats): the heuristic scores the pending folders of a customer
whose scorer fell behind, scopes
with folders missing from the index are re-indexed, recall states stop naming folders that are
gone, and image files no folder names (a crash between copying an image and committing its
archive) are deleted once they are an hour old, so an archive in flight keeps its copy.
Damage is the self-check's business, not the audit's.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from runtime.memory.heuristic import score_backlog
from runtime.memory.recall import load_state, save_state
from runtime.memory.report import read_only
from runtime.memory.store import MemoryStore
from runtime.store.clock import now_ms

ORPHAN_IMAGE_AGE_S = 3600.0


class ScopeAudit(BaseModel):
    scope: str
    folders: int
    cap_percent: float  # of KEFU_MEMORY__MAX_FOLDERS
    pending: int
    stale_pending: int  # waiting past the scorer's delay
    review: int
    unindexed: int  # folders without an index entry
    dangling: int  # recall state ids (block, ledger, register) whose folder is gone

    def findings(self) -> list[str]:
        found = [
            f"{self.stale_pending} pending past the scorer's delay" if self.stale_pending else "",
            f"{self.unindexed} folders not indexed" if self.unindexed else "",
            f"{self.dangling} recall state ids name no folder" if self.dangling else "",
            f"{self.cap_percent:.0f}% of the folder cap used" if self.cap_percent >= 90 else "",
        ]
        return [f"{self.scope}: {line}" for line in found if line]


class Audit(BaseModel):
    scopes: list[ScopeAudit]
    orphan_images: list[str]  # file names in the memory images folder no folder names
    applied: list[str] = []

    def findings(self) -> list[str]:
        found = [line for scope in self.scopes for line in scope.findings()]
        if self.orphan_images:
            found.append(f"{len(self.orphan_images)} image files no folder names")
        return found


def audit(path: Path, images_dir: Path, max_folders: int, stale_after_ms: int) -> Audit:
    before = now_ms() - stale_after_ms
    with read_only(path) as db:
        rows = db.execute(
            "SELECT f.scope, COUNT(*), SUM(f.scored = 0), SUM(f.scored = 0 AND f.created_at < ?), SUM(f.review),"
            " SUM(e.folder_id IS NULL) FROM folder f LEFT JOIN index_entry e ON e.folder_id = f.id"
            " GROUP BY f.scope ORDER BY f.scope",
            (before,),
        ).fetchall()
        states: dict[str, str] = dict(db.execute("SELECT scope, state FROM recall_state").fetchall())
        ids = {row[0] for row in db.execute("SELECT id FROM folder")}
        named = {Path(row[0]).name for row in db.execute("SELECT path FROM folder_image")}
    scopes = [
        ScopeAudit(
            scope=scope,
            folders=folders,
            cap_percent=100.0 * folders / max_folders,
            pending=pending,
            stale_pending=stale,
            review=review,
            unindexed=unindexed,
            dangling=len(_state_ids(states.get(scope)) - ids),
        )
        for scope, folders, pending, stale, review, unindexed in rows
    ]
    files = sorted(p for p in images_dir.glob("*/*") if p.is_file()) if images_dir.is_dir() else []
    return Audit(scopes=scopes, orphan_images=[str(p.relative_to(images_dir)) for p in files if p.name not in named])


def _state_ids(state: str | None) -> set[str]:
    """The folder ids a saved recall state names (none from one that does not read: selfcheck
    fails it as damage; the audit carries on)."""
    try:
        saved = json.loads(state) if state else {}
        return {*saved.get("block", []), *saved.get("ledger", {}), *saved.get("deferred", {})}
    except (ValueError, AttributeError, TypeError):
        return set()


def apply(store: MemoryStore, found: Audit, images_dir: Path) -> Audit:
    """The upkeep for what `found` shows; the audit with what was done."""
    done: list[str] = []
    for scope in found.scopes:
        if scope.stale_pending:
            scored = score_backlog(store, scope.scope)
            done.append(f"{scope.scope}: heuristic scored {scored}")
        if scope.unindexed:
            done.append(f"{scope.scope}: re-indexed {store.rebuild_index(scope.scope)} folders")
        if scope.dangling:
            state = load_state(store, scope.scope)
            held = {folder.id for folder in store.folders(scope.scope)}
            pruned = state.model_copy(
                update={
                    "block": [i for i in state.block if i in held],
                    "ledger": {i: n for i, n in state.ledger.items() if i in held},
                    "deferred": {i: n for i, n in state.deferred.items() if i in held},
                }
            )
            save_state(store, scope.scope, pruned)
            done.append(f"{scope.scope}: recall state pruned of {scope.dangling} ids")
    old = now_ms() / 1000 - ORPHAN_IMAGE_AGE_S
    removed = 0
    for name in found.orphan_images:
        path = images_dir / name
        if path.is_file() and path.stat().st_mtime < old:
            path.unlink()
            removed += 1
    if found.orphan_images:
        done.append(
            f"deleted {removed} of {len(found.orphan_images)} unnamed image files (the rest are under an hour old)"
        )
    return found.model_copy(update={"applied": done})
