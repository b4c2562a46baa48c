"""A CJK-aware tokenizer without a dictionary: Latin words (with inner dots and dashes, so
`v1.2.0` stays one token), lower-cased, and bigrams of every run of CJK characters (a run of one
is itself a token). The same function indexes folders and analyses queries."""

from __future__ import annotations

import re

_LATIN = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]+")


def tokens(text: str) -> list[str]:
    lowered = text.lower()
    found = _LATIN.findall(lowered)
    for run in _CJK.findall(lowered):
        found += [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]
    return found
