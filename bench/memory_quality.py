"""Memory recall quality on synthetic long dialogue, beside whole-folder BM25, in one run.

Three generators: `zh`, Chinese customer-service conversations (bench.service_chat); `en`,
English multi-session persona chat between two people (bench.persona_chat); `days`, one shop's
store where a target buyer's days hide among many other buyers' days on the same products, the
questions dated absolutely or relatively (bench.shop_days). Each dialogue is archived through
the engine itself (folder planning, one plan per session, the store, the heuristic scorer);
each question's evidence is a known set of turns, hence of folders. A question asked on a
given day passes that day (`today`) to recall. Every question is answered, in the same run, by:

- kefu fresh: `select` (k = 10) with a new recall state per question; its picks in order;
- kefu continuous: one recall state per dialogue, the questions asked in turn (as a live
  customer's turns);
- block: what the recall block holds after that round (the block's default limits: this
  round's picks that still fit first, then what it kept from earlier rounds);
- memory_recall: the tool's ranking (`RecallIndex.ranked`), page after page;
- BM25 standard: whole-folder BM25 with a standard analyzer of its own (Unicode words
  lower-cased, Lucene's English stop words, CJK bigrams; no stemming, no keywords, no titles);
- BM25 jieba: the same BM25 over jieba's words (rjieba.cut of the lower-cased text, less
  whitespace and punctuation; nothing else dropped).

Printed per language: folder-level evidence any@1/@5/@10 (some evidence folder in the top k)
and all@5/@10 (every one), and any@5 by question kind. The run repeats on a held-out seed that
no constant was chosen on; `--sweep` varies the recall constants to show the margin does not
hang on one setting.

    python -m bench.memory_quality [--lang zh|en|days|all] [--dialogues N] [--seed 11]
                                   [--held-out-seed 29] [--sweep]

--dialogues defaults to 40 for zh and en, 60 for days (a days dialogue holds ~150 folders: about
a minute and a half for both seeds on two cores).
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import re
import tempfile
import time
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import rjieba
from rich.console import Console
from rich.table import Column, Table

from bench import persona_chat, service_chat, shop_days
from bench.persona_chat import Dialogue, Question
from config import RecallSettings
from runtime.memory import recall
from runtime.memory.engine import BlockEntry, next_block
from runtime.memory.folders import ArchivedMessage, plan_folders, render
from runtime.memory.heuristic import score_backlog
from runtime.memory.recall import RecallIndex, RecallState, select
from runtime.memory.store import MemoryStore

KS = (1, 5, 10)
COLUMNS = (("any", 1), ("any", 5), ("any", 10), ("all", 5), ("all", 10))
GENERATORS: dict[str, Callable[[random.Random], Dialogue]] = {
    "zh": lambda rng: service_chat.generate(rng, sessions=60),
    "en": lambda rng: persona_chat.generate(rng, sessions=20),
    "days": lambda rng: shop_days.generate(rng),
}
DIALOGUES = {"zh": 40, "en": 40, "days": 60}  # a days dialogue: ~150 buyer-days, one folder each
METHODS = (
    "kefu fresh",
    "kefu continuous",
    "block (continuous)",
    "memory_recall",
    "BM25 standard",
    "BM25 jieba",
)
SHOP_ZONE = ZoneInfo("Asia/Shanghai")  # the zone the generators' labels and relative days are in

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


def jieba_tokens(text: str) -> list[str]:
    """jieba's words of the lower-cased text, less those that are only whitespace or punctuation."""
    return [
        word
        for word in rjieba.cut(text.lower())
        if not all(c.isspace() or unicodedata.category(c).startswith("P") for c in word)
    ]


class StandardBM25:
    """Whole-folder BM25 (k1 1.2, b 0.75) over an analyzer's tokens (the standard one by default)."""

    def __init__(self, texts: dict[str, str], analyzer: Callable[[str], list[str]] = standard_tokens) -> None:
        self.analyzer = analyzer
        self.postings: dict[str, dict[str, int]] = defaultdict(dict)
        lengths = {}
        for folder_id, text in texts.items():
            terms = Counter(analyzer(text))
            lengths[folder_id] = sum(terms.values())
            for term, count in terms.items():
                self.postings[term][folder_id] = count
        average = sum(lengths.values()) / max(len(lengths), 1)
        self.norms = {i: 1.2 * (0.25 + 0.75 * n / average) for i, n in lengths.items()}
        self.n = len(texts)

    def top(self, query: str, k: int) -> list[str]:
        found: defaultdict[str, float] = defaultdict(float)
        for term in set(self.analyzer(query)):
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


def asked_on(question: Question) -> date | None:
    """The civil day a question is asked on, in the shop's zone; None when it has no time."""
    if question.asked_at_ms is None:
        return None
    return datetime.fromtimestamp(question.asked_at_ms / 1000, SHOP_ZONE).date()


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
            bm25_jieba = StandardBM25(texts, jieba_tokens)
            tally.dialogues += 1
            tally.folders += len(texts)
            state, block = RecallState(), list[BlockEntry]()
            for number, question in enumerate(dialogue.questions):
                tally.questions += 1
                tally.kind_totals[question.kind] += 1
                evidence = [owners[i] for i in question.evidence]
                today = asked_on(question)
                fresh, _ = select(index, question.text, RecallState(), today=today)
                continuous, state = select(index, question.text, state, today=today)
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
                    ("memory_recall", index.ranked(question.text, today=today)),
                    ("BM25 standard", bm25.top(question.text, 10)),
                    ("BM25 jieba", bm25_jieba.top(question.text, 10)),
                ):
                    tally.add(method, ranked, evidence, question.kind)
            tally.lanes.update(state.counters.model_dump())
    return tally


def print_tally(console: Console, title: str, tally: Tally) -> None:
    table = Table(Column("method", no_wrap=True), *(f"{mode}@{k}" for mode, k in COLUMNS), title=title)
    for method in METHODS:
        table.add_row(method, *(f"{tally.rate(method, mode, k):.3f}" for mode, k in COLUMNS))
    console.print(table)
    kinds = sorted(tally.kind_totals)
    by_kind = Table(
        Column("method", no_wrap=True),
        *(f"{kind} (n={tally.kind_totals[kind]})" for kind in kinds),
        title="any@5 by kind",
    )
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
    parser.add_argument("--lang", choices=("zh", "en", "days", "all"), default="all")
    parser.add_argument(
        "--dialogues",
        type=int,
        help="per generator; default: " + ", ".join(f"{lang} {n}" for lang, n in DIALOGUES.items()),
    )
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--held-out-seed", type=int, default=29, help="a seed no constant was chosen on")
    parser.add_argument("--sweep", action="store_true", help="also vary recall's constants (seed only)")
    args = parser.parse_args()
    console = Console(width=max(Console().width, 150))
    for lang in tuple(GENERATORS) if args.lang == "all" else (args.lang,):
        dialogues = args.dialogues or DIALOGUES[lang]
        for label, seed in (("seed", args.seed), ("held-out seed", args.held_out_seed)):
            started = time.monotonic()
            tally = run(lang, dialogues, seed)
            print_tally(console, f"{lang}: evidence recall ({label} {seed})", tally)
            console.print(f"{lang}, {label} {seed}: {dialogues} dialogues in {time.monotonic() - started:.1f} s")
        if args.sweep:
            table = Table("constants", "kefu any@1", "kefu any@5", "BM25 any@1", "BM25 any@5", title=f"{lang}: sweep")
            for values in SWEEP:
                with constants(**values):
                    tally = run(lang, dialogues, args.seed)
                label = ", ".join(f"{k}={v}" for k, v in values.items()) or "defaults"
                table.add_row(
                    label,
                    *(f"{tally.rate(m, 'any', k):.3f}" for m in ("kefu fresh", "BM25 standard") for k in (1, 5)),
                )
            console.print(table)


if __name__ == "__main__":
    main()
