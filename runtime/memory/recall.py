"""Recall: which scored folders a buyer's message brings back (SPEC 5, FAIR-DRI).

Candidates come from lexical matching over each folder's full archived text (BM25 with the
CJK-aware tokenizer), with the model's keywords, the title and the event label as extra
signal; keywords match both ways (a folder keyword inside the message, a message token inside
a multi-word keyword). Unscored folders never recall.

Selection is deterministic: priority σ = (alpha desc, created asc, id asc). Candidates are the
folders scoring at least 35% of the best match. Each round has a quota k (default 10). First,
a rare-term lane (source §1.3) takes up to k − r folders holding a query term found in at most
τ = max(8, ⌈0.002 N⌉) folders (an order number, a name), most relevant first, so an exact
reference is never crowded out by σ. r = 2 rotation slots are kept for low-alpha matches (alpha < 0.6), taken
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
from array import array

from pydantic import BaseModel

from runtime.memory.store import Folder, IndexedFolder, MemoryStore
from runtime.memory.tokenize import tokens

HIGH_ALPHA = 0.6
K1, B = 1.2, 0.75
KEYWORD_BONUS = 2.0
TITLE_EVENT_BONUS = 0.5
RELEVANCE_FLOOR = 0.35
RARE_MIN_POSTING, RARE_RATIO = 8, 0.002  # source §1.3's rare-term lane
# Closed synonym classes (source §1.3 categoryMatch): a question naming a class ("我的偏好是什么")
# finds the high-alpha memories whose keywords name it in other words ("喜好").
CATEGORY_CLASSES: dict[str, tuple[str, ...]] = {
    "preference": ("喜好", "偏好", "喜欢", "爱好", "口味", "习惯", "讨厌"),
    "agreement": ("约定", "说好", "承诺", "答应", "保证"),
    "decision": ("决定", "定了", "决策"),
    "rule": ("规则", "要求", "必须", "禁忌"),
}


def sigma(folder: Folder | IndexedFolder) -> tuple[float, int, str]:
    return (-folder.alpha, folder.created_at, folder.id)


class RecallIndex:
    """One scope's scored folders and their postings, read from the store's snapshot; a term's
    posting list is unpacked the first time a query names it."""

    def __init__(
        self, folders: list[IndexedFolder], packed: tuple[dict[str, bytes], dict[str, bytes], dict[str, bytes]]
    ) -> None:
        self.folders = {f.id: f for f in folders}
        self._ids = {f.rowid: f.id for f in folders}
        self._packed, keywords, extras = packed
        self._postings: dict[str, dict[str, int]] = {}
        average = sum(f.length for f in folders) / len(folders) if folders else 1.0
        scale = K1 * B / (average or 1)
        self.norms = {f.id: K1 * (1 - B) + scale * f.length for f in folders}
        self.sigmas = {f.id: (-f.alpha, f.created_at, f.id) for f in folders}  # σ, see sigma()
        self.keyword_folders = self._unpack(keywords)  # model keyword -> folders carrying it
        self.extra_folders = self._unpack(extras)  # title or event token -> folders
        self.category_folders = {  # class -> high-alpha folders whose keywords name it
            name: sorted(
                {i for word in words for i in self.keyword_folders.get(word, ()) if -self.sigmas[i][0] >= HIGH_ALPHA}
            )
            for name, words in CATEGORY_CLASSES.items()
        }

    def _unpack(self, packed: dict[str, bytes]) -> dict[str, list[str]]:
        ids = self._ids
        unpacked = {}
        for term, rows in packed.items():
            found = array("I")
            found.frombytes(rows)
            unpacked[term] = [ids[row] for row in found if row in ids]
        return unpacked

    @classmethod
    def build(cls, store: MemoryStore, scope: str) -> RecallIndex:
        """From the stored snapshots: texts are tokenised once, when they are archived, and
        keywords indexed when they are judged."""
        return cls(store.index_folders(scope), store.postings(scope))

    def posting(self, term: str) -> dict[str, int]:
        """Scored folders holding the term -> its count there."""
        found = self._postings.get(term)
        if found is None:
            pairs = array("I")
            pairs.frombytes(self._packed.get(term, b""))
            ids = self._ids
            found = {ids[row]: count for row, count in zip(pairs[::2], pairs[1::2], strict=True) if row in ids}
            self._postings[term] = found
        return found

    def scores(self, query: str) -> dict[str, float]:
        """Folders matching the query, with their lexical score."""
        terms = set(tokens(query))
        lowered = query.lower()
        n = len(self.folders)
        found: dict[str, float] = {}
        for term in terms:
            posting = self.posting(term)
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
        for name, words in CATEGORY_CLASSES.items():
            if any(word in lowered for word in words):
                for folder_id in self.category_folders[name]:
                    found[folder_id] = found.get(folder_id, 0.0) + KEYWORD_BONUS
        return found

    def candidates(self, query: str, found: dict[str, float] | None = None) -> list[str]:
        """The folders the query matches well enough to be recalled: at least RELEVANCE_FLOOR of
        the best lexical score. Full-text matching makes nearly every folder match some common
        bigram; the floor keeps FAIR-DRI's σ order among the relevant ones."""
        found = self.scores(query) if found is None else found
        floor = max(found.values(), default=0.0) * RELEVANCE_FLOOR
        return [i for i, s in found.items() if s >= floor]

    def rare_matches(self, query: str, found: dict[str, float] | None = None) -> list[str]:
        """Folders holding a rare query term (an order number, a name: in at most
        τ = max(8, ⌈0.002 N⌉) folders), most relevant first, then σ."""
        tau = max(RARE_MIN_POSTING, math.ceil(RARE_RATIO * len(self.folders)))
        rare = {i for t in set(tokens(query)) if len(p := self.posting(t)) <= tau for i in p}
        if not rare:
            return []
        found = self.scores(query) if found is None else found
        return sorted(rare, key=lambda i: (-found[i], self.sigmas[i]))

    def ranked(self, query: str) -> list[str]:
        """Every candidate in a stable order: rare-term matches by relevance, then the rest by σ
        (what `memory_recall` pages through)."""
        found = self.scores(query)
        rare = self.rare_matches(query, found)
        taken = set(rare)
        return rare + sorted((i for i in self.candidates(query, found) if i not in taken), key=self.sigmas.__getitem__)


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


def folders_recalled(store: MemoryStore, scope: str) -> list[tuple[Folder, bool]]:
    """The scope's folders, each with whether it is in the recall block now (for operators)."""
    block = set(load_state(store, scope).block)
    return [(folder, folder.id in block) for folder in store.folders(scope)]


def select(
    index: RecallIndex, query: str, state: RecallState, k: int = 10, r: int = 2
) -> tuple[list[str], RecallState]:
    """This round's picks (rare-term lane, then high σ, then rotation) and the new state."""
    in_block = set(state.block)
    keys = index.sigmas
    found = index.scores(query)
    rare = [i for i in index.rare_matches(query, found) if i not in in_block][: k - r]
    taken = in_block | set(rare)
    k -= len(rare)
    matched = [keys[i] for i in index.candidates(query, found) if i not in taken]
    high = heapq.nsmallest(k, (key for key in matched if -key[0] >= HIGH_ALPHA))
    low = sorted(key for key in matched if -key[0] < HIGH_ALPHA)
    cursor = state.low_cursor
    start = bisect.bisect_right(low, cursor) if cursor is not None else 0
    after = low[start : start + k]
    rotation = after + low[: min(start, k - len(after))]  # after the cursor, then wrapping around
    low_slots = min(r, len(rotation), k)  # k: what the rare lane left
    high_picks = high[: k - low_slots]
    low_picks = rotation[: k - len(high_picks)]
    cursor = low_picks[-1] if low_picks else cursor
    picks = rare + [key[2] for key in high_picks] + [key[2] for key in low_picks]
    new_state = RecallState(round=state.round + 1, low_cursor=cursor, block=[*state.block, *picks])
    return picks, new_state
