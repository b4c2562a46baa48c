"""Time windows for `memory_recall` (SPEC 5; source §1.10): civil days, months and years in the
shop's zone, DST-correct, with the widening ladder.

A folder covers the half-open range [event_from, event_to + 1) of its messages' times; a window
[start, end) matches it when the two overlap. A day starts at the first instant that exists
on that civil day (on a day whose midnight falls in a DST gap, e.g. America/Santiago in
September, that is 01:00), never by adding 86,400,000 ms.

A single point widens when nothing matches: a day → the day ±1 (three days) → its month → its
year → everything; a month → its year → everything; a year → everything. An explicit range
(both ends) is hard: it never widens, because "nothing in this range" is the answer. A range
shorter than three days grows around its centre to three days; a reversed one is swapped; one
longer than 366 days is cut to 366; the future is clamped to now. Invalid input means no time
constraint, with a warning; it never raises.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel

from runtime.memory.time_expressions import point as chinese_point

MIN_DAYS = 3
MAX_DAYS = 366
Unit = Literal["day", "month", "year"]
_POINT = re.compile(r"^(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?$")


class Window(BaseModel):
    start_ms: int
    end_ms: int  # exclusive
    level: str  # day, day3, month, year, range
    hard: bool = False


class TimeQuery(BaseModel):
    windows: list[Window]  # tried in order; an empty list means no time constraint
    warnings: list[str] = []


def day_start(day: date, zone: ZoneInfo) -> int:
    """The first existing instant of a civil day, in ms. A midnight inside a DST gap resolves
    (fold 0, the offset before the change) to the instant of the change itself."""
    return int(datetime.combine(day, time(), tzinfo=zone).timestamp() * 1000)


def _unit_range(day: date, unit: Unit) -> tuple[date, date]:
    if unit == "day":
        return day, day + timedelta(days=1)
    if unit == "month":
        nxt = date(day.year + (day.month == 12), day.month % 12 + 1, 1)
        return date(day.year, day.month, 1), nxt
    return date(day.year, 1, 1), date(day.year + 1, 1, 1)


def _parse_point(text: str) -> tuple[date, Unit] | None:
    match = _POINT.match(text.strip())
    if match is None:
        return None
    year, month, day = match.group(1), match.group(2), match.group(3)
    try:
        return date(int(year), int(month or 1), int(day or 1)), "day" if day else "month" if month else "year"
    except ValueError:
        return None  # 2023-02-29, month 13 …


def _window(first: date, last_exclusive: date, zone: ZoneInfo, level: str, now_ms: int, hard: bool = False) -> Window:
    start, end = day_start(first, zone), day_start(last_exclusive, zone)
    return Window(start_ms=min(start, now_ms), end_ms=min(end, now_ms + 1), level=level, hard=hard)


_UNITS: tuple[Unit, ...] = ("day", "month", "year")


def _point(text: str, zone: ZoneInfo, granularity: Unit | None, today: date) -> tuple[date, Unit] | None:
    """A written point, epoch milliseconds (its civil day in the zone) or a Chinese expression
    (`昨天`, `上周五`, `4月27号`, `2024年5月`: runtime.memory.time_expressions); a coarser
    granularity than the writing widens it (2025-03-05 as a month is March 2025)."""
    text = text.strip()
    if text.isdigit() and len(text) >= 10:
        try:
            text = datetime.fromtimestamp(int(text) / 1000, tz=zone).date().isoformat()
        except (OverflowError, OSError, ValueError):
            return None
    point = _parse_point(text) or chinese_point(text, today)
    if point is None or granularity is None:
        return point
    day, unit = point
    return day, max(unit, granularity, key=_UNITS.index)


def time_query(
    time_from: str | None, time_to: str | None, zone: ZoneInfo, now_ms: int, granularity: Unit | None = None
) -> TimeQuery:
    given = [t for t in (time_from, time_to) if t is not None and t.strip()]
    if not given:
        return TimeQuery(windows=[])
    today = datetime.fromtimestamp(now_ms / 1000, tz=zone).date()
    parsed = [_point(t, zone, granularity, today) for t in given]
    points = [p for p in parsed if p is not None]
    if len(points) < len(parsed):
        return TimeQuery(
            windows=[],
            warnings=[
                "time: use YYYY, YYYY-MM, YYYY-MM-DD, epoch milliseconds or a Chinese date (昨天, 上周五,"
                " 4月27号, 2024年5月); no time constraint applied"
            ],
        )
    if len(points) == 1:
        day, unit = points[0]
        if time_to is not None and time_from is None:  # only an end: the minimum range before it
            first = _unit_range(day, unit)[1] - timedelta(days=MIN_DAYS)
            return TimeQuery(windows=[_window(first, _unit_range(day, unit)[1], zone, "range", now_ms)])
        return TimeQuery(windows=_ladder(min(day, today), unit, zone, now_ms))
    (a, unit_a), (b, unit_b) = points
    if a > b:
        (a, unit_a), (b, unit_b) = (b, unit_b), (a, unit_a)
    first, last = _unit_range(a, unit_a)[0], _unit_range(b, unit_b)[1]
    if (last - first).days < MIN_DAYS:
        centre = first + (last - first) / 2
        first = centre - timedelta(days=MIN_DAYS / 2)
        first = date(first.year, first.month, first.day)
        last = first + timedelta(days=MIN_DAYS)
    if (last - first).days > MAX_DAYS:
        last = first + timedelta(days=MAX_DAYS)
    return TimeQuery(windows=[_window(first, last, zone, "range", now_ms, hard=True)])


def _ladder(day: date, unit: Unit, zone: ZoneInfo, now_ms: int) -> list[Window]:
    windows: list[Window] = []
    if unit == "day":
        windows.append(_window(day, day + timedelta(days=1), zone, "day", now_ms))
        windows.append(_window(day - timedelta(days=1), day + timedelta(days=2), zone, "day3", now_ms))
    if unit in ("day", "month"):
        windows.append(_window(*_unit_range(day, "month"), zone, "month", now_ms))
    windows.append(_window(*_unit_range(day, "year"), zone, "year", now_ms))
    return windows  # and after the year: no constraint at all


def overlaps(window: Window, event_from: int, event_to: int) -> bool:
    """A folder covering [event_from, event_to + 1) matches the window [start, end)."""
    return event_from < window.end_ms and event_to + 1 > window.start_ms
