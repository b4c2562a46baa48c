"""Memory recall quality on synthetic long dialogue, beside whole-folder BM25, in one run.

Two generators: `zh`, Chinese customer-service conversations (bench.service_chat), and `en`,
English multi-session persona chat between two people (bench.persona_chat). Each dialogue is
archived through the engine itself (folder planning, one plan per session for `en`, the store,
the heuristic scorer); each question's evidence is a known set of turns, hence of folders.
Every question is answered, in the same run, by:

- kefu fresh: `select` (k = 10) with a new recall state per question; its picks in order;
- kefu continuous: one recall state per dialogue, the questions asked in turn (as a live
  customer's turns);
- block: what the recall block holds after that round (the block's default limits: this
  round's picks that still fit first, then what it kept from earlier rounds);
- memory_recall: the tool's ranking (`RecallIndex.ranked`), page after page;
- BM25 standard: whole-folder BM25 with a standard analyzer of its own (Unicode words
  lower-cased, Lucene's English stop words, CJK bigrams; no stemming, no keywords, no titles).

Printed per language: folder-level evidence any@1/@5/@10 (some evidence folder in the top k)
and all@5/@10 (every one), and any@5 by question kind. The run repeats on a held-out seed that
no constant was chosen on; `--sweep` varies the recall constants to show the margin does not
hang on one setting.

    python -m bench.memory_quality [--lang zh|en|both] [--dialogues 40] [--seed 11]
                                   [--held-out-seed 29] [--sweep]
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import re
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench import persona_chat, service_chat
from bench.persona_chat import Dialogue
from config import RecallSettings
from runtime.agent.memory import BlockEntry, next_block
from runtime.memory import recall
from runtime.memory.folders import ArchivedMessage, plan_folders, render
from runtime.memory.heuristic import score_backlog
from runtime.memory.recall import RecallIndex, RecallState, select
from runtime.memory.store import MemoryStore

KS = (1, 5, 10)
COLUMNS = (("any", 1), ("any", 5), ("any", 10), ("all", 5), ("all", 10))
GENERATORS: dict[str, Callable[[random.Random], Dialogue]] = {
    "zh": lambda rng: service_chat.generate(rng, sessions=60),
    "en": lambda rng: persona_chat.generate(rng, sessions=20),
}
METHODS = ("kefu fresh", "kefu continuous", "block (continuous)", "memory_recall", "BM25 standard")

# Lucene's English stop words (StandardAnalyzer), the usual baseline analyzer.
LUCENE_STOP = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they"
    " this to was will with".split()
)
_WORD = re.compile(r"\w+")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def standard_tokens(text: str) -> list[str]:
    """Unicode words lower-cased without stop words; CJK runs as bigrams (Lucene's CJK way)."""
    found: list[str] = []
    for word in _WORD.findall(text.lower()):
        if _CJK.search(word):
            found += [word] if len(word) == 1 else [word[i : i + 2] for i in range(len(word) - 1)]
        elif word not in LUCENE_STOP:
            found.append(word)
    return found


class StandardBM25:
    """Whole-folder BM25 (k1 1.2, b 0.75) over the standard analyzer's tokens."""

    def __init__(self, texts: dict[str, str]) -> None:
        self.postings: dict[str, dict[str, int]] = defaultdict(dict)
        lengths = {}
        for folder_id, text in texts.items():
            terms = Counter(standard_tokens(text))
            lengths[folder_id] = sum(terms.values())
            for term, count in terms.items():
                self.postings[term][folder_id] = count
        average = sum(lengths.values()) / max(len(lengths), 1)
        self.norms = {i: 1.2 * (0.25 + 0.75 * n / average) for i, n in lengths.items()}
        self.n = len(texts)

    def top(self, query: str, k: int) -> list[str]:
        found: Counter[str] = Counter()
        for term in set(standard_tokens(query)):
            posting = self.postings.get(term, {})
            idf = math.log(1 + (self.n - len(posting) + 0.5) / (len(posting) + 0.5))
            for folder_id, tf in posting.items():
                found[folder_id] += idf * tf * 2.2 / (tf + self.norms[folder_id])
        return heapq.nlargest(k, found, key=lambda i: (found[i], i))


def folder_of_messages(messages: list[ArchivedMessage], folders: list[tuple[str, int]]) -> dict[int, set[str]]:
    """Message index (in `messages`) -> the folders holding its rendered text (plans concatenate)."""
    spans, offset = [], 0
    for message in messages:
        size = len(render(message))
        spans.append((offset, offset + size))
        offset += size
    owners: dict[int, set[str]] = defaultdict(set)
    start = 0
    for folder, chars in folders:
        end = start + chars
        for index, (a, b) in enumerate(spans):
            if a < end and b > start:
                owners[index].add(folder)
        start = end
    return owners


class Tally:
    def __init__(self) -> None:
        self.hits: Counter[tuple[str, str, int]] = Counter()
        self.kinds: Counter[tuple[str, str]] = Counter()
        self.kind_totals: Counter[str] = Counter()
        self.lanes: Counter[str] = Counter()  # continuous state: picks per lane and the counters
        self.questions = self.folders = self.dialogues = 0

    def add(self, method: str, ranked: list[str], evidence: list[set[str]], kind: str) -> None:
        for mode, k in COLUMNS:
            got = set(ranked[:k])
            self.hits[(method, mode, k)] += (any if mode == "any" else all)(e & got for e in evidence)
        self.kinds[(method, kind)] += any(e & set(ranked[:5]) for e in evidence)

    def rate(self, method: str, mode: str, k: int) -> float:
        return self.hits[(method, mode, k)] / max(self.questions, 1)


def _archive(store: MemoryStore, scope: str, dialogue: Dialogue) -> tuple[dict[int, set[str]], dict[str, str]]:
    """One plan per session; message index -> evidence folders, and the folders' texts."""
    owners: dict[int, set[str]] = {}
    base = 0
    for number, session in enumerate(dialogue.sessions):
        made = store.commit_archive(scope, f"{scope}-s{number}", plan_folders(session, 1200))
        for index, folders in folder_of_messages(session, [(f.id, f.chars) for f in made]).items():
            owners[base + index] = folders
        base += len(session)
    score_backlog(store, scope)
    return owners, {f.id: store.text(f.id) for f in store.folders(scope)}


def run(lang: str, dialogues: int, seed: int) -> Tally:
    rng = random.Random(seed)
    tally = Tally()
    limits = RecallSettings()
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(Path(tmp) / "memory.sqlite")
        for n in range(dialogues):
            dialogue = GENERATORS[lang](rng)
            scope = f"dialogue-{n}"
            owners, texts = _archive(store, scope, dialogue)
            index = RecallIndex.build(store, scope)
            bm25 = StandardBM25(texts)
            tally.dialogues += 1
            tally.folders += len(texts)
            state, block = RecallState(), list[BlockEntry]()
            for number, question in enumerate(dialogue.questions):
                tally.questions += 1
                tally.kind_totals[question.kind] += 1
                evidence = [owners[i] for i in question.evidence]
                fresh, _ = select(index, question.text, RecallState())
                continuous, state = select(index, question.text, state)
                tally.lanes.update({lane: n for lane, n in state.lanes.items() if n})
                turn = f"t{number}"
                block, dropped = next_block(block, continuous, turn, index.folders, limits.max_blocks, limits.max_chars)
                state = state.with_block([e.folder_id for e in block], dropped, index.folders)
                in_block = [e.folder_id for e in block]  # this round's picks first, then what else it holds
                held = [i for i in continuous if i in in_block] + [i for i in in_block if i not in continuous]
                for method, ranked in (
                    ("kefu fresh", fresh),
                    ("kefu continuous", continuous),
                    ("block (continuous)", held),
                    ("memory_recall", index.ranked(question.text)),
                    ("BM25 standard", bm25.top(question.text, 10)),
                ):
                    tally.add(method, ranked, evidence, question.kind)
            tally.lanes.update(state.counters.model_dump())
    return tally


def print_tally(console: Console, title: str, tally: Tally) -> None:
    table = Table("method", *(f"{mode}@{k}" for mode, k in COLUMNS), title=title)
    for method in METHODS:
        table.add_row(method, *(f"{tally.rate(method, mode, k):.3f}" for mode, k in COLUMNS))
    console.print(table)
    kinds = sorted(tally.kind_totals)
    by_kind = Table("method", *(f"{kind} (n={tally.kind_totals[kind]})" for kind in kinds), title="any@5 by kind")
    for method in METHODS:
        by_kind.add_row(method, *(f"{tally.kinds[(method, kind)] / tally.kind_totals[kind]:.2f}" for kind in kinds))
    console.print(by_kind)
    console.print(
        f"{tally.dialogues} dialogues, {tally.folders} folders ({tally.folders / max(tally.dialogues, 1):.0f} each),"
        f" {tally.questions} questions"
    )
    console.print("continuous lanes: " + ", ".join(f"{name} {n}" for name, n in sorted(tally.lanes.items())))


@contextmanager
def constants(**values: float) -> Iterator[None]:
    """Recall's module constants set for a sweep, then restored."""
    saved = {name: getattr(recall, name) for name in values}
    for name, value in values.items():
        setattr(recall, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(recall, name, value)


SWEEP: list[dict[str, float]] = [
    {},
    {"RELEVANCE_FLOOR": 0.2},
    {"RELEVANCE_FLOOR": 0.5},
    {"KEYWORD_WEIGHT": 0.0, "TITLE_EVENT_WEIGHT": 0.0},
    {"KEYWORD_WEIGHT": 1.0},
    {"K1": 0.9, "B": 0.4},
    {"K1": 1.5, "B": 0.9},
    {"HIGH_ALPHA": 0.8},
    {"CATEGORY_MIN_ALPHA": 0.8},
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lang", choices=("zh", "en", "both"), default="both")
    parser.add_argument("--dialogues", type=int, default=40)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--held-out-seed", type=int, default=29, help="a seed no constant was chosen on")
    parser.add_argument("--sweep", action="store_true", help="also vary recall's constants (seed only)")
    args = parser.parse_args()
    console = Console(width=max(Console().width, 120))
    for lang in ("zh", "en") if args.lang == "both" else (args.lang,):
        for label, seed in (("seed", args.seed), ("held-out seed", args.held_out_seed)):
            print_tally(console, f"{lang}: evidence recall ({label} {seed})", run(lang, args.dialogues, seed))
        if args.sweep:
            table = Table("constants", "kefu any@1", "kefu any@5", "BM25 any@1", "BM25 any@5", title=f"{lang}: sweep")
            for values in SWEEP:
                with constants(**values):
                    tally = run(lang, args.dialogues, args.seed)
                label = ", ".join(f"{k}={v}" for k, v in values.items()) or "defaults"
                table.add_row(
                    label,
                    *(f"{tally.rate(m, 'any', k):.3f}" for m in ("kefu fresh", "BM25 standard") for k in (1, 5)),
                )
            console.print(table)


if __name__ == "__main__":
    main()
