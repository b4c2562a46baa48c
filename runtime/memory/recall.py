"""Recall: which scored folders a buyer's message brings back (SPEC 5, FAIR-DRI).

Candidates come from lexical matching over each folder's full archived text (BM25 with the
CJK-aware tokenizer), with the model's keywords, the title and the event label as extra
signal; keywords match both ways (a folder keyword inside the message, a message token inside
a multi-word keyword). Unscored folders never recall.

Selection is deterministic: priority σ = (alpha desc, created asc, id asc). Each round has a
quota k (default 10). r = 2 rotation slots are kept for low-alpha matches (alpha < 0.6), taken
in σ order after a per-scope lane cursor that persists, so a low-alpha memory that keeps
matching comes back within ⌈L / r⌉ rounds whatever number of high-alpha matches flood in. The
other k − r slots take high-alpha matches in σ order, so up to k − r matched high-alpha
memories appear in the same round. Unused slots of one lane go to the other. Folders already
in the recall block are not picked again. There is no randomness: the same store, state and
query give the same picks.
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, field

from pydantic import BaseModel

from runtime.memory.store import Folder, MemoryStore
from runtime.memory.tokenize import tokens

HIGH_ALPHA = 0.6
K1, B = 1.2, 0.75
KEYWORD_BONUS = 2.0
TITLE_EVENT_BONUS = 0.5


def sigma(folder: Folder) -> tuple[float, int, str]:
    return (-folder.alpha, folder.created_at, folder.id)


@dataclass
class RecallIndex:
    folders: dict[str, Folder]
    postings: dict[str, dict[str, int]]  # term -> folder id -> term frequency
    norms: dict[str, float]  # folder id -> BM25 length normaliser
    keyword_folders: dict[str, list[str]]  # model keyword -> folders carrying it
    extra_folders: dict[str, list[str]]  # title or event token -> folders
    sigmas: dict[str, tuple[float, int, str]] = field(default_factory=dict)  # folder id -> σ key

    def __post_init__(self) -> None:
        self.sigmas = {folder_id: sigma(folder) for folder_id, folder in self.folders.items()}

    @classmethod
    def build(cls, store: MemoryStore, scope: str) -> RecallIndex:
        """From the stored index entries: the archived texts are tokenised once, at archive time."""
        folders = {f.id: f for f in store.folders(scope) if f.scored}
        entries = store.index_entries(scope)
        postings: dict[str, dict[str, int]] = {}
        lengths: dict[str, int] = {}
        keyword_folders: dict[str, list[str]] = {}
        extra_folders: dict[str, list[str]] = {}
        for folder_id, folder in folders.items():
            lengths[folder_id], terms = entries.get(folder_id, (0, {}))
            for term, count in terms.items():
                postings.setdefault(term, {})[folder_id] = count
            for keyword in folder.keywords:
                keyword_folders.setdefault(keyword, []).append(folder_id)
            for token in set(tokens(f"{folder.title} {folder.event or ''}")):
                extra_folders.setdefault(token, []).append(folder_id)
        average = sum(lengths.values()) / len(lengths) if lengths else 1.0
        norms = {i: K1 * (1 - B + B * length / (average or 1)) for i, length in lengths.items()}
        return cls(folders, postings, norms, keyword_folders, extra_folders)

    def scores(self, query: str) -> dict[str, float]:
        """Folders matching the query, with their lexical score."""
        terms = set(tokens(query))
        lowered = query.lower()
        n = len(self.folders)
        found: dict[str, float] = {}
        for term in terms:
            posting = self.postings.get(term, {})
            idf = math.log(1 + (n - len(posting) + 0.5) / (len(posting) + 0.5))
            for folder_id, tf in posting.items():
                found[folder_id] = found.get(folder_id, 0.0) + idf * tf * (K1 + 1) / (tf + self.norms[folder_id])
        for keyword, folder_ids in self.keyword_folders.items():
            if keyword in lowered or (" " in keyword and any(len(t) > 1 and t in keyword for t in terms)):
                for folder_id in folder_ids:
                    found[folder_id] = found.get(folder_id, 0.0) + KEYWORD_BONUS
        for term in terms:
            for folder_id in self.extra_folders.get(term, ()):
                found[folder_id] = found.get(folder_id, 0.0) + TITLE_EVENT_BONUS
        return found


class RecallState(BaseModel):
    """What recall remembers between rounds (snapshotted with the scope)."""

    round: int = 0
    low_cursor: tuple[float, int, str] | None = None  # σ of the last low-alpha pick
    block: list[str] = []  # folder ids in the recall block now


def save_state(store: MemoryStore, scope: str, state: RecallState) -> None:
    store.save_recall_state(scope, state.model_dump_json())


def load_state(store: MemoryStore, scope: str) -> RecallState:
    """The scope's recall state as last saved (a fresh one if none), e.g. after a restart."""
    saved = store.recall_state(scope)
    return RecallState.model_validate_json(saved) if saved else RecallState()


def select(
    index: RecallIndex, query: str, state: RecallState, k: int = 10, r: int = 2
) -> tuple[list[str], RecallState]:
    """This round's picks (σ order within each lane: high first, then rotation) and the new state."""
    in_block = set(state.block)
    keys = index.sigmas
    matched = [keys[i] for i in index.scores(query) if i not in in_block]
    high = heapq.nsmallest(k, (key for key in matched if -key[0] >= HIGH_ALPHA))
    low = sorted(key for key in matched if -key[0] < HIGH_ALPHA)
    cursor = tuple(state.low_cursor) if state.low_cursor is not None else None
    start = bisect.bisect_right(low, cursor) if cursor is not None else 0
    after = low[start : start + k]
    rotation = after + low[: min(start, k - len(after))]  # after the cursor, then wrapping around
    low_slots = min(r, len(rotation), k)
    high_picks = high[: k - low_slots]
    low_picks = rotation[: k - len(high_picks)]
    cursor = low_picks[-1] if low_picks else cursor
    picks = [key[2] for key in high_picks] + [key[2] for key in low_picks]
    new_state = RecallState(round=state.round + 1, low_cursor=cursor, block=[*state.block, *picks])
    return picks, new_state
