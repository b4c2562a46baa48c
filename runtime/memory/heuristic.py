"""A deterministic scorer for folders no model scores: always under the `rules` agent, and as
the fallback for a backlog the model leaves pending. It goes through `memory_judge`'s own
validation, so its scores obey the same ranges and category rule."""

from __future__ import annotations

import re
from collections import Counter

from runtime.memory.categories import CATEGORY_MARKERS
from runtime.memory.judge import MAX_UPDATES, JudgeResult, judge
from runtime.memory.store import HEURISTIC, MemoryStore
from runtime.memory.tokenize import STOPWORDS, tokens

# Labels and framing every archived text carries: never a folder's keyword.
ROLE_WORDS = {"user", "assistant", "tool", "counterpart", "operator", "from", "console", "native", "reply", "text"}
# Chinese function words and service phrases too common to tell one memory from another.
COMMON = set(
    "什么 可以 已回 回复 顾客 我们 您的 请问 一下 没有 这个 那个 怎么 需要 就是 如果 可能 现在 时候 谢谢 好的 你好"
    " 在吗 您好 的话 一个 还是 知道 不是 然后 但是 因为 所以 这样 那么 为什么 看看 帮您 请您 即可 之前 以后".split()
)
_NOISE = re.compile(r"^(\d{1,4}|\d{4}-\d{2}-\d{2})$")
_FACTS = re.compile(
    r"\d{3,}|[省市区县路街号]|订单|地址|电话|手机|快递|退款|发票"
    r"|\b(?:order|address|phone|email|birthday|anniversary|married|moved|born|tracking|refund|invoice)\b"
)
# kefu's own framing of every archived line: a role, a time label, a sender label. Never content:
# a year in a time label is no order number, and a sender's name is no keyword.
_FRAMING = re.compile(
    r"^(?:user|assistant|tool): |\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2})?\]"
    r"|\[(?:counterpart|operator|assistant)[^\]]*\]",
    re.MULTILINE,
)
_SURFACE = re.compile(r"[a-z0-9]+(?:[.-][a-z0-9]+)*")
FALLBACK_WORDS = ("对话", "客服", "记录")


def content_of(text: str) -> str:
    """An archived text without kefu's labels: what the people said."""
    return _FRAMING.sub(" ", text)


def _alpha_of(text: str) -> float:
    said = content_of(text)
    lowered = said.lower()
    if any(marker in lowered for _, markers in CATEGORY_MARKERS for marker in markers):
        return 0.7  # a preference, agreement or decision
    if _FACTS.search(lowered):
        return 0.5  # concrete facts: order numbers, addresses, amounts
    return 0.2


def _words(text: str) -> list[str]:
    """Keyword candidates as written (a keyword is shown to operators and the model): Latin
    words but function words, and Chinese words (the tokenizer's)."""
    lowered = text.lower()
    latin = [w for w in _SURFACE.findall(lowered) if w not in STOPWORDS and len(w) > 1]
    return latin + [t for t in tokens(lowered) if not t.isascii()]


def _keywords_of(text: str, title: str, count: int = 6) -> list[str]:
    found = [t for t in _words(content_of(text)) if t not in ROLE_WORDS and t not in COMMON and not _NOISE.match(t)]
    ranked = Counter(found)
    order = {t: i for i, t in reversed(list(enumerate(found)))}
    words = sorted(ranked, key=lambda t: (-ranked[t], order[t]))[:count]
    for extra in (*_words(title), *FALLBACK_WORDS):
        if len(words) >= 3:
            break
        if extra not in words and extra not in ROLE_WORDS:
            words.append(extra)
    return words


def score_pending(store: MemoryStore, scope: str, limit: int = 100) -> JudgeResult:
    pending = [folder for folder in store.folders(scope) if not folder.scored or folder.review][:limit]
    updates = []
    for folder in pending:
        text = store.text(folder.id)
        updates.append(
            {"id": folder.id, "alpha": _alpha_of(text), "beta": 0.0, "keywords": _keywords_of(text, folder.title)}
        )
    return judge(store, scope, {"updates": updates}, source=HEURISTIC)


def score_backlog(store: MemoryStore, scope: str) -> int:
    """Heuristic scores for every pending or review folder of a scope, in judge-sized batches
    and recorded once; how many were scored."""
    scored = 0
    while True:
        batch = len(score_pending(store, scope, MAX_UPDATES).updated)
        scored += batch
        if batch < MAX_UPDATES:
            break
    if scored:
        store.record(scope, "judge", source="heuristic", updated=scored)
    return scored
