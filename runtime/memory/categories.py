"""Category keywords (source §1.2): a high-alpha memory of a preference, an agreement or a decision
carries one, so an abstract question ("what do I like?", "what did we agree?") finds it."""

from __future__ import annotations

CATEGORY_WORDS = ("喜好", "偏好", "习惯", "约定", "承诺", "决定", "规则", "要求", "禁忌")
# Deterministic markers in the archived text -> the category keyword to add.
CATEGORY_MARKERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("喜好", ("喜欢", "偏好", "讨厌", "爱吃", "不爱", "口味", "prefer", "favorite")),
    ("约定", ("约定", "说好", "以后都", "以后", "不要", "必须", "下次", "promise")),
    ("决定", ("决定", "定了", "就这么办", "decided")),
)
