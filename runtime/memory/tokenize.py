"""The recall tokenizer, without a dictionary: the same function indexes folders and analyses
queries, so whatever it does to one it does to the other.

- CJK: bigrams of every run of CJK characters (a run of one is itself a token).
- Latin script: case-folded words (inner dots and dashes kept, so `v1.2.0` and `2023-05-08`
  stay whole); function words dropped (a stoplist); each other word as written and as its
  stem (Snowball's English stemmer), so `paints`, `painted`, `painting` meet and the very form
  asked for still counts more; a hyphenated compound also gives its parts.
- Dates, in the forms people ask for: an ISO date (kefu's own time labels) or a written one
  (`8 May 2023`, `May 8th`, `May 2023`) gives its year, its month by name and `month-day`, so
  "what did I buy in May" meets a folder labelled 2023-05-08. A month name is a month wherever
  it stands, except `may`, which counts only next to a day or a year.
"""

from __future__ import annotations

import re
from functools import lru_cache

import snowballstemmer

_WORD = re.compile(r"[a-z0-9]+(?:['’.-][a-z0-9]+)*")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]+")

MONTHS = "january february march april may june july august september october november december".split()
_MONTH_OF = (
    {name: i + 1 for i, name in enumerate(MONTHS)} | {name[:3]: i + 1 for i, name in enumerate(MONTHS)} | {"sept": 9}
)
_MONTH = "(" + "|".join(sorted(_MONTH_OF, key=len, reverse=True)) + r")\.?"  # a whole month name
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_SMALL_NUMBER = re.compile(r"^\d{1,2}(?:st|nd|rd|th)?$")
_ISO_DATE = re.compile(r"\b(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})\b")
_DAY_MONTH = re.compile(rf"\b{_DAY}(?:\s+of)?\s+{_MONTH}(?:,?\s+(\d{{4}}))?\b")
_MONTH_DAY = re.compile(rf"\b{_MONTH}\s+{_DAY}\b(?:,?\s+(\d{{4}}))?")
_MONTH_YEAR = re.compile(rf"\b{_MONTH},?\s+(\d{{4}})\b")

# Function words of English (NLTK's list, with contractions' pieces and chat fillers): they
# sit in nearly every folder, so they carry no relevance and must never count as rare terms.
STOPWORDS = frozenset(
    """a about above after again against ain all also am an and any are aren as at be because been before
    being below between both but by can couldn d did didn do does doesn doing don down during each few for
    from further had hadn has hasn have haven having he her here hers herself him himself his how i if in
    into is isn it its itself just ll m ma me might mightn more most mustn my myself needn no nor not now o
    of off on once only or other our ours ourselves out over own re s same shan she should shouldn so some
    such t than that the their theirs them themselves then there these they this those through to too
    under until up ve very was wasn we were weren what when where which while who whom why will with won
    would wouldn y you your yours yourself yourselves may also could shall us let lets oh ok okay yeah yes
    hey hi hello wow um uh hmm lol haha really well still even much many one ever get got""".split()
)

_stem = snowballstemmer.stemmer("english").stemWord


@lru_cache(maxsize=1 << 16)
def _word_tokens(word: str) -> tuple[str, ...]:
    """One Latin word's tokens: none for a function word; the word and its stem (an exact
    match counts twice, a match of forms once); a compound's parts."""
    word = word.replace("’", "'")
    if "'" in word:  # a possessive or contraction: the word before it ("caroline's", "don't")
        word = word.split("'", 1)[0]
    if word in STOPWORDS or (len(word) == 1 and not word.isdigit()):
        return ()
    month = _MONTH_OF.get(word)
    if month is not None and word != "may":  # "may" is a month only beside a day or a year
        return (MONTHS[month - 1],)
    if _SMALL_NUMBER.match(word):
        return ()  # a day, an hour, a count: the date tokens carry days; alone they match anything
    if any(c.isdigit() for c in word):
        return (word,)  # numbers and codes as written: an order number, a version, a date
    if "-" in word or "." in word:
        parts = [p for p in re.split(r"[-.]", word) if p]
        return (word, *(t for p in parts for t in _word_tokens(p)))
    stem = _stem(word)
    return (word,) if stem == word else (word, stem)


def _date_tokens(text: str) -> list[str]:
    """Year, month name and month-day of every date written in the text."""
    found: list[str] = []

    def add(month: int | str, day: str | None) -> None:
        number = month if isinstance(month, int) else _MONTH_OF[month.rstrip(".")[:3]]
        if not 1 <= number <= 12:
            return
        name = MONTHS[number - 1]
        if isinstance(month, int) or month == "may":  # any other month name is its own token already
            found.append(name)
        if day is not None and 1 <= int(day) <= 31:
            found.append(f"{name}-{int(day)}")

    for year, month, day in _ISO_DATE.findall(text):  # one word: its year is not a token yet
        found.append(year)
        add(int(month), day)
    dated: set[int] = set()  # where a month with its day was found
    for pattern, month_group in ((_DAY_MONTH, 2), (_MONTH_DAY, 1)):
        for match in pattern.finditer(text):
            dated.add(match.start(month_group))
            add(match.group(month_group), match.group(3 - month_group))
    for match in _MONTH_YEAR.finditer(text):
        if match.group(1) == "may" and match.start(1) not in dated:
            add(match.group(1), None)
    return found


def tokens(text: str) -> list[str]:
    lowered = text.lower()
    found = [t for word in _WORD.findall(lowered) for t in _word_tokens(word)]
    found += _date_tokens(lowered)
    for run in _CJK.findall(lowered):
        found += [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]
    return found
