"""`memory_judge`: the model scores folders (SPEC 5; source §1.2, §1.12).

Each update is checked on its own, so one bad item never sinks the batch. A pending folder
needs alpha, beta and 3–8 keywords together. Values are clamped (alpha 0.01–1 to 4 decimals,
beta −10–10 to 1 decimal). A high-alpha preference or agreement memory gets a category keyword
from its own text when the model left it out. Event labels are normalised and merged into an
existing label that is at least 0.72 similar (Dice over Latin words, CJK bigrams and single
CJK characters), including labels written earlier in the same batch.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.errors import KefuError, invalid_fields
from runtime.memory.categories import CATEGORY_MARKERS, CATEGORY_WORDS
from runtime.memory.store import HEURISTIC, MemoryStore, Score

MAX_UPDATES = 100
ALPHA_MIN, ALPHA_MAX, ALPHA_WARN = 0.01, 1.0, 0.8
HIGH_ALPHA = 0.6
KEYWORDS_MIN, KEYWORDS_MAX = 3, 8
EVENT_MAX = 60
EVENT_SIMILAR = 0.72
EMPTY_EVENT = {"空", "无", "不约束", "无事件", "none", "null", "n/a", "na", "-"}


class JudgeCallInvalid(KefuError):
    def __init__(self, message: str) -> None:
        super().__init__("KEFU_MEMORY_JUDGE_INVALID", message, "submit {updates: [...]} with at most 100 items")


class JudgeUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=256)
    alpha: float | None = None
    beta: float | None = None
    keywords: list[str] | None = Field(None, max_length=50)
    event: str | None = Field(None, max_length=500)
    keep: bool = False
    reason: str | None = Field(None, max_length=2000)


class Rejection(BaseModel):
    id: str
    reason: str


class JudgeResult(BaseModel):
    updated: list[str] = []
    kept: list[str] = []
    rejected: list[Rejection] = []
    warnings: list[str] = []


def judge(store: MemoryStore, scope: str, call: Any, source: str = "llm") -> JudgeResult:
    """Apply a `memory_judge` call. The batch is written in one transaction."""
    updates = call.get("updates") if isinstance(call, dict) else None
    if not isinstance(updates, list):
        raise JudgeCallInvalid("`updates` must be a list")
    if len(updates) > MAX_UPDATES:
        raise JudgeCallInvalid(f"{len(updates)} updates in one call; at most {MAX_UPDATES}, submit in batches")
    result = JudgeResult()
    events = store.events(scope)
    scores: list[Score] = []
    for raw in updates:
        item_id = str(raw.get("id", "?")) if isinstance(raw, dict) else "?"
        try:
            update = JudgeUpdate.model_validate(raw)
        except ValidationError as error:
            result.rejected.append(Rejection(id=item_id, reason=invalid_fields(error, "update")))
            continue
        folder = store.folder(update.id)
        if folder is None or folder.scope != scope:
            result.rejected.append(Rejection(id=update.id, reason="unknown folder id"))
            continue
        if update.keep:
            result.kept.append(update.id)
            continue
        if not folder.scored and (update.alpha is None or update.beta is None or update.keywords is None):
            result.rejected.append(Rejection(id=update.id, reason="a new memory needs alpha, beta and keywords"))
            continue
        keywords = _clean_keywords(update.keywords) if update.keywords is not None else folder.keywords
        if update.keywords is not None and not KEYWORDS_MIN <= len(keywords) <= KEYWORDS_MAX:
            result.rejected.append(Rejection(id=update.id, reason="keywords: 3 to 8 distinct words needed"))
            continue
        alpha = _clamp_alpha(update.alpha) if update.alpha is not None else folder.alpha
        beta = _clamp_beta(update.beta) if update.beta is not None else folder.beta
        if alpha >= HIGH_ALPHA and update.keywords is not None:
            keywords, note = _add_category(keywords, store.text(update.id))
            if note:
                result.warnings.append(f"{note} ({update.id})")
        if alpha > ALPHA_WARN:
            result.warnings.append(f"α={alpha} is above {ALPHA_WARN} ({update.id}): review it when you next judge")
        # The source is whose keywords the folder carries (recall counts a model's, not the heuristic's).
        given = source if update.keywords is not None else folder.score_source
        score = Score(
            folder_id=update.id, alpha=alpha, beta=beta, keywords=keywords, source=given, reason=update.reason
        )
        if update.event is not None:
            label = normalize_event(update.event)
            if label is not None:
                merged = similar_event(label, events)
                if merged is not None and merged != label:
                    result.warnings.append(f"event “{label}” merged into the existing “{merged}”")
                    label = merged
                if label not in events:
                    events.append(label)  # visible to the rest of this batch
            score = score.model_copy(update={"event_given": True, "event": label})
        scores.append(score)
        result.updated.append(update.id)
    store.save_scores(scope, scores, kept=result.kept)
    if source != HEURISTIC:
        result.warnings += quality_warnings(scores)
    return result


def quality_warnings(scores: list[Score]) -> list[str]:
    """Signs of a batch judged by rote (source §1.2): the same keywords on every memory, one α
    or one β for all, no reasons. Scores stand as given; the model reads these with the result."""
    if len(scores) < 3:
        return []
    warnings = []
    words = [word for score in scores for word in score.keywords]
    repeated = 1 - len(set(words)) / len(words) if words else 0.0
    if repeated > 0.5:
        warnings.append(f"quality: {repeated:.0%} of the keywords repeat across memories; give each its own words")
    for name, values in (("α", {s.alpha for s in scores}), ("β", {s.beta for s in scores})):
        if len(values) == 1:
            warnings.append(f"quality: every memory of the batch got the same {name}; score each on its own")
    missing = sum(1 for score in scores if not score.reason)
    if missing * 10 > len(scores) * 9:
        warnings.append(f"quality: {missing} of {len(scores)} memories have no reason; say why in a few words")
    return warnings


def _clamp_alpha(value: float) -> float:
    return round(min(max(value, ALPHA_MIN), ALPHA_MAX), 4)


def _clamp_beta(value: float) -> float:
    return round(min(max(value, -10.0), 10.0), 1)


def _clean_keywords(keywords: list[str]) -> list[str]:
    cleaned: list[str] = []
    for keyword in keywords:
        word = " ".join(unicodedata.normalize("NFKC", str(keyword)).split()).lower()
        if word and word not in cleaned:
            cleaned.append(word)
    return cleaned


def _add_category(keywords: list[str], text: str) -> tuple[list[str], str | None]:
    """Make sure a high-alpha preference/agreement/decision memory carries its category word."""
    if any(word in keywords for word in CATEGORY_WORDS):
        return keywords, None
    lowered = text.lower()
    category = next((c for c, markers in CATEGORY_MARKERS if any(m in lowered for m in markers)), None)
    if category is None:
        return keywords, None
    if len(keywords) < KEYWORDS_MAX:
        return [*keywords, category], f"category-keyword-added “{category}”"
    return [*keywords[:-1], category], f"category-keyword-replaced “{category}”"


_QUOTES = "\"'“”‘’「」『』《》()（）[]【】"


def normalize_event(label: str) -> str | None:
    """NFKC, collapsed spaces, lower-case Latin, no surrounding quotes or brackets, at most 60
    code points; None for an empty label or a placeholder meaning "no event"."""
    text = " ".join(unicodedata.normalize("NFKC", label).split()).lower().strip(_QUOTES).strip()
    text = text[:EVENT_MAX]
    return None if not text or text in EMPTY_EVENT else text


_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]+")
_LATIN_WORD = re.compile(r"[a-z0-9]{2,}")


def _event_terms(label: str) -> set[str]:
    terms = set(_LATIN_WORD.findall(label))
    for run in _CJK.findall(label):
        terms.update(run)
        terms.update(run[i : i + 2] for i in range(len(run) - 1))
    return terms


def dice(a: str, b: str) -> float:
    x, y = _event_terms(a), _event_terms(b)
    return 2 * len(x & y) / (len(x) + len(y)) if x or y else 0.0


def similar_event(label: str, existing: list[str]) -> str | None:
    """The existing label this one is the same event as (exactly, or similar ≥ 0.72)."""
    if label in existing:
        return label
    scored = sorted(((dice(label, other), other) for other in existing), key=lambda s: (-s[0], s[1]))
    return scored[0][1] if scored and scored[0][0] >= EVENT_SIMILAR else None
