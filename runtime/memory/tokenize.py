"""The recall tokenizer: the same function indexes folders and analyses queries, so whatever it
does to one it does to the other.

- Chinese: jieba's words (rjieba: jieba's dictionary and algorithm, built into the wheel) in
  search mode, so a long word also gives the words inside it (`科幻电影` → `科幻`, `电影`,
  `科幻电影`) and a question's shorter word still meets it; function words (`的`, `什么`,
  `还记得`) dropped, so only content words can count as rare. Bigrams straddling two words
  (`的名`, `了什`) are never tokens. Kana and Hangul runs: bigrams.
- Latin script: case-folded words (inner dots and dashes kept, so `v1.2.0` and `2023-05-08`
  stay whole); function words dropped (a stoplist); each other word as written and as its
  stem (Snowball's English stemmer), so `paints`, `painted`, `painting` meet and the very form
  asked for still counts more; a hyphenated compound also gives its parts.
- Dates, in the forms people ask for: an ISO date (kefu's own time labels) or a written one
  (`8 May 2023`, `May 8th`, `May 2023`) gives its year, its month by name and `month-day`, so
  "what did I buy in May" meets a folder labelled 2023-05-08. A month name is a month wherever
  it stands, except `may`, which counts only next to a day or a year. A full date also gives
  its weekday (`wednesday`).
- Chinese dates (runtime.memory.time_expressions): `4月27号`, `2024年5月`, `周三` give the same
  tokens, and so do relative ones (`昨天`, `上周五`, `三天前`), dated from their line's time
  label in archived text or from `today`, the day a question is asked.
"""

from __future__ import annotations

import re
from datetime import date
from functools import lru_cache

import snowballstemmer

from runtime.memory.time_expressions import Mention, read_times

_WORD = re.compile(r"[a-z0-9]+(?:['’.-][a-z0-9]+)*")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_KANA_HANGUL = re.compile(r"[\u3040-\u30ff\uac00-\ud7af]+")
_ZH_NUMERAL = re.compile(r"^[零〇一二两三四五六七八九十百千万]+$")

WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
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

# Function words of Chinese chat, as jieba cuts them: particles, pronouns, question words, the
# frames of a question ("我跟你说过", "还记得吗") and a shop's pleasantries. They sit in nearly
# every folder, so, like English function words, they must never count as rare terms.
ZH_STOPWORDS = frozenset(
    """的 地 得 了 着 过 吗 呢 吧 啊 呀 哦 哈 嘛 啦 呗 噢 嗯 哎 喔 么 之 其 所 以 而 及 与 和 跟 同 或 并 且 但
    就 也 都 还 又 再 才 只 很 太 更 最 挺 真 蛮 好 请 是 有 在 没 不 别 要 会 能 可 想 让 把 被 给 对 向 从 到 于
    为 去 来 说 问 讲 看 做 用 个 些 位 次 点 下 上 里 中 这 那 哪 谁 啥 几 多 少 我 你 您 他 她 它 咱 自 己 们
    一 呃 嘿 喂 哇 诶 该 先 后 已 刚 将 等 如 若 则 即 便 此 每 各 某 什么 怎么 怎样 怎么样 为什么 为何 哪个
    哪些 哪里 哪儿 哪一 哪一个 哪一部 哪一款 哪一天 哪天 哪位 多少 几个 这个 那个 这些 那些 这样 那样 这么
    那么 这里 那里 这儿 那儿 一下 一个 一些 一点 一直 一样 一起 一共 我们 你们 他们 她们 它们 咱们 大家 自己
    已经 可以 可能 还是 就是 但是 不过 因为 所以 如果 然后 而且 或者 还有 以及 现在 时候 的话 之前 以前
    之后 以后 当时 那天 那时 来着 记得 还记得 知道 告诉 没有 不是 是不是 有没有 是否 请问 谢谢 感谢 麻烦
    您好 你好 好的 好吧 没事 不用 不客气 亲 亲亲 客服 一下子 应该 需要 能不能 可不可以 其实
    当然 确实 非常 特别 比较 真的 还会 还要 一定 曾经 刚才 刚刚 之类 什么样 提过 说过 讲过 问过 跟我说
    跟你说 说的 问的 上次 这次 那次 当初 月 号 年 日 天 前 一部 一款 一次 一天 一件 一双 一份""".split()
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


@lru_cache(maxsize=1 << 16)
def _han_tokens(run: str) -> tuple[str, ...]:
    """A run of Chinese characters as its content words, each in search mode's pieces too."""
    import rjieba  # its dictionary loads with the first Chinese text, not with every `kefu` command

    return tuple(
        word for word in rjieba.cut_for_search(run) if word not in ZH_STOPWORDS and not _ZH_NUMERAL.match(word)
    )


def mention_tokens(mention: Mention) -> list[str]:
    """A named day's tokens, the same as an English or ISO date's."""
    found = [str(mention.year)] if mention.year is not None else []
    if mention.month is not None:
        found.append(MONTHS[mention.month - 1])
        if mention.day is not None:
            found.append(f"{MONTHS[mention.month - 1]}-{mention.day}")
    if mention.weekday is not None:
        found.append(WEEKDAYS[mention.weekday])
    return found


def _date_tokens(text: str) -> list[str]:
    """Year, month name and month-day of every date written in the text (and an ISO date's
    weekday)."""
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
        try:
            found.append(WEEKDAYS[date(int(year), int(month), int(day)).weekday()])
        except ValueError:
            pass  # no such day: its month and day stand
    dated: set[int] = set()  # where a month with its day was found
    for pattern, month_group in ((_DAY_MONTH, 2), (_MONTH_DAY, 1)):
        for match in pattern.finditer(text):
            dated.add(match.start(month_group))
            add(match.group(month_group), match.group(3 - month_group))
    for match in _MONTH_YEAR.finditer(text):
        if match.group(1) == "may" and match.start(1) not in dated:
            add(match.group(1), None)
    return found


def tokens(text: str, today: date | None = None) -> list[str]:
    """`today`: the day a question is asked, which dates what it says relative to it."""
    lowered = text.lower()
    found = [t for word in _WORD.findall(lowered) for t in _word_tokens(word)]
    found += _date_tokens(lowered)
    if _HAN.search(lowered):
        named, rest = read_times(lowered, today)
        found += [t for mention in named for t in mention_tokens(mention)]
        found += [t for run in _HAN.findall(rest) for t in _han_tokens(run)]
    for run in _KANA_HANGUL.findall(lowered):
        found += [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]
    return found
