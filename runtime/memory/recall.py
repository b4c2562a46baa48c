"""Recall: which scored folders a buyer's message brings back (SPEC 5, FAIR-DRI).

Candidates come from lexical matching over each folder's full archived text (BM25 with the
recall tokenizer: Chinese words, stemmed Latin words without function words, dates), with the
model's keywords, the title and the event label as extra signal, each matched token by token
and weighted by how rare the token is. Unscored folders never recall.

Selection is deterministic and relevance comes first within every lane. Candidates are the
folders scoring at least 35% of the best match. Each round has a quota k (default 10), taken by
the lanes in this order (source §1.3):

- rare: up to k − r folders holding a query term found in at most τ = max(8, ⌈0.002 N⌉)
  folders (an order number, a name), so an exact reference is never crowded out; when more
  than k − r match, the round counts as degraded;
- boost (queryBoost): high-alpha folders the block lost to its limits or to re-archiving (the
  ledger, the high-alpha recycle) that the query matches again, once they sat out `cooldown`
  rounds after the one they left in, so a trimmed memory comes back when it is asked about
  without thrashing in and out of the block every round;
- high: matches of alpha ≥ 0.6, the strongest first (σ = (alpha desc, created asc, id asc)
  breaks ties), so every matched high-alpha memory up to the quota appears in the same round.
  The next 3 × (k − r) matches past the quota wait in the register for REGISTER_TTL rounds
  (at most 8 × (k − r) wait; more are dropped and counted);
- low: r slots kept for matches of lower alpha. One of them (with r ≥ 2) probes the strongest
  such match; the other r − 1 rotate in σ order after a per-scope cursor that persists, so a
  low-alpha memory that keeps matching comes back within ⌈L / (r − 1)⌉ rounds (L rounds with
  r = 1, which only rotates), whatever number of stronger matches flood in. Slots the high
  lanes leave unused go to the low lane's probe;
- register: deferred high-alpha matches fill the slots this round's query leaves unused. A
  deferral is a match of an earlier message, so it never takes a slot from a match of this one
  (the source puts it before the high lane; kefu keeps relevance first).

The picks come out strongest first, then cut to the round's character budget (the first always
stays). A folder already in the recall block is picked like any other (the block keeps what is
still relevant; the caller adds only what is new), so what a round finds does not depend on
what earlier rounds found. No randomness: the same store, state and query give the same picks.
"""

from __future__ import annotations

import bisect
import heapq
import math
from array import array
from collections.abc import Callable, Mapping
from datetime import date
from functools import cache, lru_cache
from pathlib import Path

from pydantic import BaseModel

from runtime.memory.store import Folder, IndexedFolder, MemoryStore
from runtime.memory.tokenize import tokens
from runtime.store.lru import Lru

HIGH_ALPHA = 0.6  # θ_H: the high lanes' memories
CATEGORY_MIN_ALPHA = 0.6  # source categoryMatch.alphaMin: a common word never finds low-alpha memories
K1, B = 1.2, 0.75
KEYWORD_WEIGHT = 0.5  # of a keyword token's idf: the folder is about that term
TITLE_EVENT_WEIGHT = 0.25  # of a title or event token's idf
RELEVANCE_FLOOR = 0.35
RARE_MIN_POSTING, RARE_RATIO = 8, 0.002  # source §1.3's rare-term lane
COOLDOWN_ROUNDS = 2  # rounds a trimmed high-alpha memory sits out before a match boosts it back
REGISTER_TTL = 2  # rounds a deferred high-alpha match waits for a free slot
REGISTER_LOOKAHEAD, REGISTER_CAPACITY = 3, 8  # × (k − r): deferred per round, waiting at most
LEDGER_CAPACITY = 256  # trimmed high-alpha folders remembered for the boost lane
# Closed synonym classes (source §1.3 categoryMatch): a question naming a class ("我的偏好是什么")
# finds the high-alpha memories whose keywords name it in other words ("喜好").
CATEGORY_CLASSES: dict[str, tuple[str, ...]] = {
    "preference": (
        *("喜好", "偏好", "喜欢", "爱好", "口味", "习惯", "讨厌"),
        *("preference", "prefer", "favorite", "favourite", "hate", "habit", "taste", "hobby"),
    ),
    "agreement": ("约定", "说好", "承诺", "答应", "保证", "agreement", "agree", "promise", "deal"),
    "decision": ("决定", "定了", "决策", "decision", "decide"),
    "rule": ("规则", "要求", "必须", "禁忌", "rule", "requirement", "require", "must"),
}


@lru_cache(maxsize=256)
def query_terms(query: str, today: date | None = None) -> frozenset[str]:
    """A query's distinct tokens: a round scores and looks for rare terms with the same ones, and
    segmenting Chinese is the costly part."""
    return frozenset(tokens(query, today))


@cache
def category_tokens() -> dict[str, frozenset[str]]:
    """Each class's words as tokens (made on first use: tokenizing loads the segmenter)."""
    return {name: frozenset(t for word in words for t in tokens(word)) for name, words in CATEGORY_CLASSES.items()}


BUILT_KEPT = 256  # scopes whose index a process keeps (RecallIndex.of)
_built: Lru[tuple[Path, str, float], tuple[int, RecallIndex]] = Lru(BUILT_KEPT)


Sigma = tuple[float, int, str]  # (−alpha, created at, id): a folder's place among equals
_Ranked = tuple[float, Sigma]  # (−score, σ) of a candidate: the stronger first, σ between equals


def sigma(folder: Folder | IndexedFolder) -> Sigma:
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
        self.keyword_folders = self._unpack(keywords)  # token of a model keyword -> folders carrying it
        self.extra_folders = self._unpack(extras)  # title or event token -> folders
        self.category_folders = {  # class -> high-alpha folders whose keywords name it
            name: sorted(
                {
                    i
                    for word in words
                    for i in self.keyword_folders.get(word, ())
                    if -self.sigmas[i][0] >= CATEGORY_MIN_ALPHA
                }
            )
            for name, words in category_tokens().items()
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
    def of(cls, store: MemoryStore, scope: str, min_alpha: float = 0.0) -> RecallIndex:
        """The scope's index, as last built in this process while the store's postings version
        (which every change of the scope's folders or postings renews) stands: a turn's recall
        does not rebuild an index that grows with the customer's history."""
        version = store.postings_version(scope)
        key = (store.path, scope, min_alpha)
        held = _built.get(key)
        if held is not None and version is not None and held[0] == version:
            return held[1]
        index = cls.build(store, scope, min_alpha)
        if version is not None:
            _built.put(key, (version, index))
        return index

    @classmethod
    def build(cls, store: MemoryStore, scope: str, min_alpha: float = 0.0) -> RecallIndex:
        """From the stored snapshots: texts are tokenised once, when they are archived, and
        keywords indexed when they are judged. Folders below `min_alpha` are left out."""
        folders = store.index_folders(scope)
        if min_alpha > 0:
            folders = [f for f in folders if f.alpha >= min_alpha]
        return cls(folders, store.postings(scope))

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

    def _idf(self, held_by: int) -> float:
        n = len(self.folders)
        return math.log(1 + (n - held_by + 0.5) / (held_by + 0.5))

    def scores(self, query: str, today: date | None = None) -> dict[str, float]:
        """Folders matching the query, with their lexical score: BM25 over the text, plus each
        query token among a folder's keywords, title or event, weighted by its rarity there.
        `today`, the day the query was asked, dates what it says relative to it (昨天, 上周五)."""
        terms = query_terms(query, today)
        found: dict[str, float] = {}
        get, norms = found.get, self.norms  # the hot loop: tens of thousands of postings at 10⁴ folders
        for term in terms:
            posting = self.posting(term)
            weight = self._idf(len(posting)) * (K1 + 1)
            for folder_id, tf in posting.items():
                found[folder_id] = get(folder_id, 0.0) + weight * tf / (tf + norms[folder_id])
            for signal, weight in ((self.keyword_folders, KEYWORD_WEIGHT), (self.extra_folders, TITLE_EVENT_WEIGHT)):
                holders = signal.get(term, ())
                bonus = weight * self._idf(len(holders))
                for folder_id in holders:
                    found[folder_id] = get(folder_id, 0.0) + bonus
        for name, words in category_tokens().items():  # as if the class were one more keyword
            if terms & words:
                bonus = KEYWORD_WEIGHT * self._idf(len(self.category_folders[name]))
                for folder_id in self.category_folders[name]:
                    found[folder_id] = found.get(folder_id, 0.0) + bonus
        return found

    def candidates(self, query: str, found: dict[str, float] | None = None, today: date | None = None) -> list[str]:
        """The folders the query matches well enough to be recalled: at least RELEVANCE_FLOOR of
        the best lexical score. Full-text matching makes nearly every folder match some common
        word; the floor keeps FAIR-DRI's σ order among the relevant ones."""
        found = self.scores(query, today) if found is None else found
        floor = max(found.values(), default=0.0) * RELEVANCE_FLOOR
        return [i for i, s in found.items() if s >= floor]

    def rare_matches(self, query: str, found: dict[str, float] | None = None, today: date | None = None) -> list[str]:
        """Folders holding a rare query term (an order number, a name: in at most
        τ = max(8, ⌈0.002 N⌉) folders), most relevant first, then σ. The tokenizer leaves
        function words out, so only content words can be rare."""
        tau = max(RARE_MIN_POSTING, math.ceil(RARE_RATIO * len(self.folders)))
        rare = {i for t in query_terms(query, today) if len(p := self.posting(t)) <= tau for i in p}
        if not rare:
            return []
        found = self.scores(query, today) if found is None else found
        return sorted(rare, key=self.strongest_first(found))

    def strongest_first(self, found: dict[str, float]) -> Callable[[str], tuple[float, tuple[float, int, str]]]:
        """Sort key: the stronger match first, σ between equals."""
        return lambda i: (-found.get(i, 0.0), self.sigmas[i])

    def ranked(self, query: str, today: date | None = None) -> list[str]:
        """Every candidate and rare-term match, strongest first (what `memory_recall` pages
        through: stable for a given store and query)."""
        found = self.scores(query, today)
        matched = set(self.candidates(query, found)) | set(self.rare_matches(query, found, today))
        return sorted(matched, key=self.strongest_first(found))


class RecallCounters(BaseModel):
    """Since the scope's first round: how often the lanes' guarantees bent (selfcheck reads them)."""

    re_injections: int = 0  # trimmed memories the boost lane brought back
    register_drops: int = 0  # deferred matches dropped because the register was full
    degraded: int = 0  # rounds with more rare matches than the quota


class RecallState(BaseModel):
    """What recall remembers between rounds (snapshotted with the scope). A state saved before a
    field existed reads with its default."""

    round: int = 0
    low_cursor: tuple[float, int, str] | None = None  # σ of the last low-alpha pick
    block: list[str] = []  # folder ids in the recall block now
    ledger: dict[str, int] = {}  # high-alpha folder trimmed from the block -> the round it left
    deferred: dict[str, int] = {}  # deferred high-alpha match -> the last round it may fill a slot
    lanes: dict[str, int] = {}  # the last round's picks per lane
    counters: RecallCounters = RecallCounters()

    def with_block(
        self, block: list[str], lost: list[str], folders: Mapping[str, Folder | IndexedFolder]
    ) -> RecallState:
        """The state whose block is now `block`, after it lost `lost` (to its limits or to
        re-archiving): the high-alpha ones go to the ledger, for the boost lane."""
        ledger = dict(self.ledger)
        for folder_id in lost:
            if folder_id in folders and folders[folder_id].alpha >= HIGH_ALPHA:
                ledger.pop(folder_id, None)
                ledger[folder_id] = self.round
        kept = dict(list(ledger.items())[-LEDGER_CAPACITY:])  # the oldest go first
        return self.model_copy(update={"block": block, "ledger": kept})


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
    index: RecallIndex,
    query: str,
    state: RecallState,
    k: int = 10,
    r: int = 2,
    cooldown: int = COOLDOWN_ROUNDS,
    budget_chars: int = 0,
    today: date | None = None,
) -> tuple[list[str], RecallState]:
    """This round's picks, strongest first (lanes: see the module), and the new state, whose
    block holds the earlier block and the picks not already in it. `today`: the day the query
    was said (see `RecallIndex.scores`)."""
    round_no = state.round + 1
    keys = index.sigmas
    found = index.scores(query, today)
    rare_matches = index.rare_matches(query, found, today)
    rare = rare_matches[: k - r]
    budget = k - len(rare)
    # (−score, σ) of each other candidate: the stronger first, σ between equals
    taken = set(rare)
    ranked = [(-found[i], keys[i]) for i in index.candidates(query, found) if i not in taken]
    high = [key for key in ranked if -key[1][0] >= HIGH_ALPHA]
    low = [key for key in ranked if -key[1][0] < HIGH_ALPHA]
    high_quota = budget - min(r, len(low), budget)
    due = {i for i, left in state.ledger.items() if round_no - left > cooldown}
    boost = sorted(key for key in high if key[1][2] in due)[:high_quota]
    boosted = {key[1][2] for key in boost}
    lookahead = REGISTER_LOOKAHEAD * (k - r)
    strongest = heapq.nsmallest(high_quota - len(boost) + lookahead, (key for key in high if key[1][2] not in boosted))
    high_picks, deferred = strongest[: high_quota - len(boost)], strongest[high_quota - len(boost) :]
    low_budget = min(budget - len(boost) - len(high_picks), len(low))
    cursor = state.low_cursor
    probe, rotation = _low_lanes(low, low_budget, min(r - 1 if r >= 2 else r, low_budget), cursor)
    lanes = {
        "rare": [(-found[i], keys[i]) for i in rare],
        "boost": boost,
        "high": high_picks,
        "probe": probe,
        "rotation": [(-found[s[2]], s) for s in rotation],
    }
    picked = {key[1][2] for chosen in lanes.values() for key in chosen}
    free = k - len(picked)
    waiting = _register_waiting(state, round_no, keys, found, picked)
    lanes["register"] = waiting[:free]
    picks = [key[1][2] for key in sorted(key for chosen in lanes.values() for key in chosen)]
    picks, cut = _within_budget(picks, index, budget_chars)
    kept = set(picks)
    register = {key[1][2]: state.deferred[key[1][2]] for key in waiting}  # less what this round kept, below
    for key in deferred:  # a match deferred again keeps its first deadline
        register.setdefault(key[1][2], round_no + REGISTER_TTL)
    register = {i: until for i, until in register.items() if i not in kept}
    capacity = REGISTER_CAPACITY * (k - r)
    drops = max(0, len(register) - capacity)
    rotated = [s for s in rotation if s[2] in kept]
    counters = state.counters
    in_block = set(state.block)
    return picks, RecallState(
        round=round_no,
        low_cursor=rotated[-1] if rotated else cursor,
        block=[*state.block, *(i for i in picks if i not in in_block)],
        ledger={i: left for i, left in state.ledger.items() if i not in kept},
        deferred=dict(list(register.items())[:capacity]),  # the earliest deferred stay
        lanes={name: sum(key[1][2] in kept for key in chosen) for name, chosen in lanes.items()} | {"budget_cut": cut},
        counters=RecallCounters(
            re_injections=counters.re_injections + sum(key[1][2] in kept for key in boost),
            register_drops=counters.register_drops + drops,
            degraded=counters.degraded + (len(rare_matches) > len(rare)),
        ),
    )


def _low_lanes(
    low: list[_Ranked], low_budget: int, rotating: int, cursor: Sigma | None
) -> tuple[list[_Ranked], list[Sigma]]:
    """The low-alpha lanes: the strongest matches (`probe`), and `rotating` more taken in turn
    by σ after the last round's cursor, wrapping around, so every low folder gets its turn."""
    probe = heapq.nsmallest(low_budget - rotating, low)
    probed = {key[1][2] for key in probe}
    by_sigma = sorted(key[1] for key in low if key[1][2] not in probed)
    start = bisect.bisect_right(by_sigma, cursor) if cursor is not None else 0
    return probe, (by_sigma[start:] + by_sigma[:start])[:rotating]


def _register_waiting(
    state: RecallState, round_no: int, keys: dict[str, Sigma], found: dict[str, float], picked: set[str]
) -> list[_Ranked]:
    """High-alpha matches deferred in earlier rounds and not yet expired or picked: a match of
    this query first, then in the order they were deferred."""
    waiting = [
        (-found.get(i, 0.0), keys[i])
        for i, until in state.deferred.items()
        if until >= round_no and i in keys and i not in picked and -keys[i][0] >= HIGH_ALPHA
    ]
    return sorted(waiting, key=lambda key: key[0])


def _within_budget(picks: list[str], index: RecallIndex, budget_chars: int) -> tuple[list[str], int]:
    """The strongest picks whose text fits the round's budget (the first always: a round that
    finds something adds it), and how many were left out. 0: no budget."""
    if budget_chars <= 0:
        return picks, 0
    kept: list[str] = []
    used = 0
    for folder_id in picks:
        size = index.folders[folder_id].chars
        if kept and used + size > budget_chars:
            break
        kept.append(folder_id)
        used += size
    return kept, len(picks) - len(kept)
