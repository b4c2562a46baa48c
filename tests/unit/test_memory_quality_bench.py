"""`bench.memory_quality` on a small fixed sample of both generators: it runs, its evidence maps
to folders, and kefu's recall is not below whole-folder BM25, fresh or continuous."""

from __future__ import annotations

import pytest

from bench.memory_quality import run, standard_tokens


def test_the_standard_analyzer_is_plain():
    assert standard_tokens("The Painting of a Sunrise") == ["painting", "sunrise"]
    assert standard_tokens("羽绒被") == ["羽绒", "绒被"]


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_kefu_recall_is_not_below_bm25_and_the_block_keeps_what_it_finds(lang):
    tally = run(lang, dialogues=6, seed=5)
    assert tally.questions > 50 and tally.folders > 6 * 10
    for mode, k in (("any", 1), ("any", 5), ("all", 5)):
        bm25 = tally.rate("BM25 standard", mode, k)
        assert tally.rate("kefu fresh", mode, k) >= bm25, (mode, k)
        assert abs(tally.rate("kefu continuous", mode, k) - tally.rate("kefu fresh", mode, k)) <= 0.02
    assert tally.rate("block (continuous)", "any", 5) >= tally.rate("kefu fresh", "any", 5) - 0.02
