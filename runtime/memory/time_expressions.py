"""Chinese time expressions as the days they name, for recall's date tokens and `memory_recall`'s
time filters (issue 39). Buyers name days the way people talk: `4月27号`, `2024年5月`, `五月六日`,
`周三`, and, most often, relative to when they speak: `昨天`, `前天晚上`, `上周五`, `三天前`,
`上个月`. A relative expression needs an anchor: the day it was said. In archived text that is the
time label of the line it stands in (`[2024-04-27 10:02] …`, kefu's own labels); in a question, the
day it is asked. Without an anchor a relative expression names nothing.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Literal

_ZH_DIGITS = {digit: value for value, digit in enumerate("零一二三四五六七八九")} | {"〇": 0, "两": 2}
_FULL_WIDTH = str.maketrans("０１２３４５６７８９", "0123456789")
_N = r"(\d{1,2}|[一二两三四五六七八九十]{1,3})"  # a month's or a day's number, in digits or in words
_YEAR = r"(\d{4})\s*年"
_DAY_END = r"\s*(?:[日号號]|(?![0-9一二三四五六七八九十]))"  # `5月6日`, `5月6号`, `5月6` but not `5月60`
_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6, "末": 5}
_WEEK = r"(上上|上|这|本|下下|下)?\s*个?\s*(?:周|星期|礼拜)"

_YMD = re.compile(rf"{_YEAR}\s*{_N}\s*月\s*{_N}{_DAY_END}")
_MD = re.compile(rf"(?<![0-9年]){_N}\s*月\s*{_N}{_DAY_END}")
_YM = re.compile(rf"{_YEAR}\s*{_N}\s*月(?!\s*{_N})")
_MONTH = re.compile(rf"(?<![0-9年个]){_N}\s*月份?(?!\s*[0-9一二三四五六七八九十])")
_YEAR_ONLY = re.compile(rf"{_YEAR}(?!\s*{_N}\s*月)")
_WEEKDAY = re.compile(rf"{_WEEK}([一二三四五六日天末])")
_WEEK_ONLY = re.compile(r"(上上|上|这|本|下下|下)\s*个?\s*(?:周|星期|礼拜)(?![一二三四五六日天末])")
# Not inside another word: 目前天气, 之前晚上, 如今天气, 早上月饼 name no day.
_RELATIVE_DAY = re.compile(
    r"大前天|(?<![之以提从目眼先])(?:前天|前晚)|昨天|昨日|昨晚|昨儿|(?<!如)(?:今天|今日|今晚|今早|今儿)"
    r"|明天|明日|明晚|明早|大后天|(?<![之以然])后天"
)
_DAYS_AGO = re.compile(rf"{_N}\s*天(?:以)?前")
_RELATIVE_MONTH = re.compile(r"上上个?月|(?<![早晚马路身])上个?月|这个?月|本月|(?<![天地乡楼])下个?月")
_RELATIVE_YEAR = re.compile(r"前年|去年|今年|明年")
_ANCHOR = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")  # kefu's time labels (and any ISO date)

_DAY_OFFSETS = {"大前天": -3, "前天": -2, "前晚": -2, "昨天": -1, "昨日": -1, "昨晚": -1, "昨儿": -1}
_DAY_OFFSETS |= {"今天": 0, "今日": 0, "今晚": 0, "今早": 0, "今儿": 0, "明天": 1, "明日": 1, "明晚": 1, "明早": 1}
_DAY_OFFSETS |= {"后天": 2, "大后天": 3}
_WEEK_OFFSETS = {None: 0, "这": 0, "本": 0, "上": -1, "上上": -2, "下": 1, "下下": 2}
_MONTH_OFFSETS = {"上上": -2, "上": -1, "这": 0, "本": 0, "下": 1}
_YEAR_OFFSETS = {"前年": -2, "去年": -1, "今年": 0, "明年": 1}


@dataclass(frozen=True)
class Mention:
    """A day, a month or a year that a text names; parts it leaves open are None (`5月6日`
    names no year, `周三` only a weekday, 0 for Monday)."""

    year: int | None = None
    month: int | None = None
    day: int | None = None
    weekday: int | None = None

    @classmethod
    def of(cls, day: date) -> Mention:
        return cls(day.year, day.month, day.day, day.weekday())


def number(text: str) -> int | None:
    """`27`, `二十七`, `十二`, `两` as a number (None when it is none)."""
    if text.isdigit():
        return int(text)
    if "十" not in text:
        return _ZH_DIGITS.get(text) if len(text) == 1 else None
    tens, _, units = text.partition("十")
    if (tens and tens not in _ZH_DIGITS) or (units and units not in _ZH_DIGITS) or "十" in units:
        return None
    return (_ZH_DIGITS[tens] if tens else 1) * 10 + (_ZH_DIGITS[units] if units else 0)


def _month_day(month: str, day: str | None = None) -> tuple[int, int | None] | None:
    m, d = number(month), number(day) if day is not None else None
    if m is None or not 1 <= m <= 12 or (day is not None and (d is None or not 1 <= d <= 31)):
        return None
    return m, d


def _shift_month(year: int, month: int, by: int) -> tuple[int, int]:
    index = year * 12 + month - 1 + by
    return index // 12, index % 12 + 1


def mentions(text: str, today: date | None = None) -> list[Mention]:
    """The days, months and years `text` names. A relative expression is dated from the nearest
    ISO date before it in the text (a line's time label), else from `today`, else skipped."""
    return read_times(text, today)[0]


def read_times(text: str, today: date | None = None) -> tuple[list[Mention], str]:
    """`mentions`, and the text with the expressions read blanked out (their words, `月`, `号`,
    `上个`, are no content of their own: the mentions stand for them)."""
    text = text.translate(_FULL_WIDTH)
    found: list[Mention] = []
    taken: list[tuple[int, int]] = []  # spans already read: `2024年5月6日` is not also `5月6日`

    def free(match: re.Match[str]) -> bool:
        if any(a < match.end() and match.start() < b for a, b in taken):
            return False
        taken.append(match.span())
        return True

    for match in _YMD.finditer(text):
        parts = _month_day(match.group(2), match.group(3))
        if parts is not None and free(match):
            found.append(_full(int(match.group(1)), parts[0], parts[1]))
    for match in _MD.finditer(text):
        parts = _month_day(match.group(1), match.group(2))
        if parts is not None and free(match):
            found.append(Mention(month=parts[0], day=parts[1]))
    for match in _YM.finditer(text):
        parts = _month_day(match.group(2))
        if parts is not None and free(match):
            found.append(Mention(year=int(match.group(1)), month=parts[0]))
    for match in _MONTH.finditer(text):
        parts = _month_day(match.group(1))
        if parts is not None and free(match):
            found.append(Mention(month=parts[0]))
    for match in _YEAR_ONLY.finditer(text):
        if free(match):
            found.append(Mention(year=int(match.group(1))))
    anchors = [(m.start(), m.groups()) for m in _ANCHOR.finditer(text)]
    starts = [start for start, _ in anchors]

    def anchor(at: int) -> date | None:
        before = bisect.bisect_right(starts, at) - 1
        if before < 0:
            return today
        year, month, day = anchors[before][1]
        try:
            return date(int(year), int(month), int(day))
        except ValueError:
            return today

    for match in _WEEKDAY.finditer(text):
        if not free(match):
            continue
        weekday = _WEEKDAYS[match.group(2)]
        said = anchor(match.start())
        if match.group(1) is None or said is None:  # `周三`: which one is not said
            found.append(Mention(weekday=weekday))
            continue
        monday = said - timedelta(days=said.weekday()) + timedelta(weeks=_WEEK_OFFSETS[match.group(1)])
        found.append(Mention.of(monday + timedelta(days=weekday)))
        if match.group(2) == "末":
            found.append(Mention.of(monday + timedelta(days=6)))
    for match in _WEEK_ONLY.finditer(text):
        if free(match) and (said := anchor(match.start())) is not None:
            monday = said - timedelta(days=said.weekday()) + timedelta(weeks=_WEEK_OFFSETS[match.group(1)])
            found += [Mention.of(monday + timedelta(days=n)) for n in range(7)]
    for match in _RELATIVE_DAY.finditer(text):
        if free(match) and (said := anchor(match.start())) is not None:
            found.append(Mention.of(said + timedelta(days=_DAY_OFFSETS[match.group()])))
    for match in _DAYS_AGO.finditer(text):
        days = number(match.group(1))
        if days is not None and days <= 366 and free(match) and (said := anchor(match.start())) is not None:
            found.append(Mention.of(said - timedelta(days=days)))
    for match in _RELATIVE_MONTH.finditer(text):
        if free(match) and (said := anchor(match.start())) is not None:
            word = match.group().rstrip("月").rstrip("个")
            year, month = _shift_month(said.year, said.month, _MONTH_OFFSETS[word])
            found.append(Mention(year=year, month=month))
    for match in _RELATIVE_YEAR.finditer(text):
        if free(match) and (said := anchor(match.start())) is not None:
            found.append(Mention(year=said.year + _YEAR_OFFSETS[match.group()]))
    for start, end in taken:
        text = text[:start] + " " * (end - start) + text[end:]
    return found, text


def _full(year: int, month: int, day: int | None) -> Mention:
    if day is None:
        return Mention(year=year, month=month)
    try:
        return Mention.of(date(year, month, day))
    except ValueError:  # 2023年2月30日: the month stands
        return Mention(year=year, month=month)


def point(text: str, today: date) -> tuple[date, Literal["day", "month", "year"]] | None:
    """A time filter written in Chinese (`昨天`, `上周五`, `4月27号`, `2024年5月`, `去年`) as its
    first day and unit (day, month or year); a day or month without a year is the latest one
    not after `today`. None when it names none."""
    for mention in mentions(text, today):
        if mention.month is None and mention.year is not None:
            return date(mention.year, 1, 1), "year"
        if mention.month is None:
            continue  # a weekday alone: which week is not said
        year = mention.year
        if year is None:
            year = today.year if (mention.month, mention.day or 1) <= (today.month, today.day) else today.year - 1
        if mention.day is None:
            return date(year, mention.month, 1), "month"
        try:
            return date(year, mention.month, mention.day), "day"
        except ValueError:
            return None
    return None
