"""A report's period: whole days of the shop's zone, cut into that zone's hours and days.

Every instant belongs to one hour and one day of the shop's zone; both start on a quarter hour
of UTC in every zone there is (offsets are whole quarters), so `ZoneClock` works them out once
per quarter hour, not once per message.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from pydantic import BaseModel

from runtime.errors import KefuError
from runtime.store import now_ms

MAX_DAYS = 31  # a month at most: a longer report is several of them
QUARTER_MS = 15 * 60 * 1000
HOUR_MS = 4 * QUARTER_MS


def midnight(day: date, zone: ZoneInfo) -> int:
    """The instant (ms) the day begins in the zone."""
    return int(datetime.combine(day, time(), tzinfo=zone).timestamp() * 1000)


def local(ms: int, zone: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=zone)


def _on_the_hour(shown: datetime) -> bool:
    return shown.minute == shown.second == shown.microsecond == 0


class ZoneClock:
    """The start of the zone's hour and day an instant falls in, remembered per quarter hour."""

    def __init__(self, zone: ZoneInfo) -> None:
        self.zone = zone
        self._quarters: dict[int, tuple[int, int]] = {}

    def starts(self, ms: int) -> tuple[int, int]:
        quarter = ms // QUARTER_MS
        found = self._quarters.get(quarter)
        if found is None:
            at = quarter * QUARTER_MS
            shown = local(at, self.zone)
            found = (at - (shown.minute * 60 + shown.second) * 1000, midnight(shown.date(), self.zone))
            self._quarters[quarter] = found
        return found


class Period(BaseModel):
    """From the start of `first_day` to the end of `last_day`, in the zone named `zone`."""

    first_day: date
    last_day: date
    zone: str

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.zone)

    @property
    def start(self) -> int:
        return midnight(self.first_day, self.tz)

    @property
    def end(self) -> int:
        return midnight(self.last_day + timedelta(days=1), self.tz)

    def days(self) -> list[tuple[date, int]]:
        """Each day and the instant it begins."""
        count = (self.last_day - self.first_day).days + 1
        return [(day, midnight(day, self.tz)) for day in (self.first_day + timedelta(days=n) for n in range(count))]

    def hours(self) -> list[int]:
        """The start of each hour of the period (23 or 25 of them on a day the clocks change).
        A day whose clocks change by whole hours, or not at all, has one every hour from its
        midnight; only another day (a half-hour change) is looked at quarter by quarter."""
        found: list[int] = []
        ends = [start for _, start in self.days()] + [self.end]
        for start, end in zip(ends, ends[1:], strict=False):
            every = range(start, end, HOUR_MS)
            if (end - start) % HOUR_MS == 0 and all(_on_the_hour(local(at, self.tz)) for at in every):
                found += every
            else:
                clock = ZoneClock(self.tz)
                found += sorted({clock.starts(at)[0] for at in range(start, end, QUARTER_MS)})
        return found


def today(zone: ZoneInfo) -> date:
    return local(now_ms(), zone).date()


def period_of(zone: ZoneInfo, first: str | None = None, last: str | None = None) -> Period:
    """The period an operator asked for: `first` and `last` as YYYY-MM-DD in the shop's zone,
    both included. No `last`: through today; no `first`: the last day alone."""
    last_day = _day(last, "to") if last else today(zone)
    first_day = _day(first, "from") if first else last_day
    if last_day < first_day:
        raise KefuError(
            "KEFU_INVALID_INPUT",
            f"the report's last day {last_day} is before its first day {first_day}",
            "give a first day (from) no later than the last (to)",
        )
    if (last_day - first_day).days >= MAX_DAYS:
        raise KefuError(
            "KEFU_INVALID_INPUT",
            f"a report covers at most {MAX_DAYS} days; {first_day} to {last_day} is {(last_day - first_day).days + 1}",
            "ask for a month at a time",
        )
    return Period(first_day=first_day, last_day=last_day, zone=zone.key)


def _day(text: str, which: str) -> date:
    try:
        return date.fromisoformat(text.strip())
    except ValueError:
        raise KefuError(
            "KEFU_INVALID_INPUT",
            f"{which} must be a day as YYYY-MM-DD, not {text[:40]!r}",
            "for example 2026-03-02",
        ) from None
