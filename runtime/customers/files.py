"""Where one customer's data lives outside the delivery store: its session logs (damaged copies
kept aside included), its memory scope and its memory images. Moving an account away and
erasing a buyer both remove exactly these; one place knows them."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from runtime.agent.sessions import damaged_folder
from runtime.memory.engine import scope_of
from runtime.memory.store import MemoryStore


def session_files(sessions_dir: Path, customers: Iterable[int]) -> list[Path]:
    """Every session log of these customers, damaged ones kept aside included."""
    folders = (sessions_dir, damaged_folder(sessions_dir))
    return [p for c in customers for f in folders for p in sorted(f.glob(f"s{c}-*.jsonl.zst"))]


def leftover_files(sessions_dir: Path, customers: Iterable[int]) -> list[Path]:
    """Besides the logs: a damaged log's copy a crash left half-made (`.partial`)."""
    folders = (sessions_dir, damaged_folder(sessions_dir))
    return [p for c in customers for f in folders for p in sorted(f.glob(f"s{c}-*")) if not p.name.endswith(".zst")]


def image_files(images_dir: Path | None, customer_id: int) -> list[Path]:
    folder = images_dir / scope_of(customer_id) if images_dir is not None else None
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder is not None and folder.is_dir() else []


def drop_files(memory: MemoryStore | None, sessions_dir: Path, images_dir: Path | None, customers: list[int]) -> None:
    """Remove the customers' session logs, memory scopes and memory images (none there: no-op)."""
    for path in session_files(sessions_dir, customers) + leftover_files(sessions_dir, customers):
        path.unlink(missing_ok=True)
    for scope in map(scope_of, customers):
        if memory is not None:
            memory.delete_scope(scope)
        if images_dir is not None:
            shutil.rmtree(images_dir / scope, ignore_errors=True)
