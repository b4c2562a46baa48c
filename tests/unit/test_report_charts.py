"""The console's report plots (worker.console.reports.charts): a day's hours, a week's hours
one after another, and over a week the hours of the day summed over the period."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from runtime.operators.reports.figures import DayFigures, Figures, HourFigures, Report
from runtime.operators.reports.periods import local, period_of
from worker.console.reports import TIMELINE_DAYS, charts


def report(zone: str, first: str, last: str) -> Report:
    """A report whose every hour has (its hour of the day + 1) messages from one conversation
    fewer: figures that tell each hour apart."""
    tz = ZoneInfo(zone)
    period = period_of(tz, first, last)
    hours = [local(ms, tz) for ms in period.hours()]
    return Report(
        source="real",
        period=period,
        as_of=datetime.now(UTC),
        totals=Figures(),
        days=[DayFigures(day=day) for day, _ in period.days()],
        hours=[HourFigures(start=h, messages=h.hour + 1, conversations=h.hour) for h in hours],
        operators=[],
    )


def test_a_day_is_plotted_by_its_hours_alone():
    plots = charts(report("Asia/Shanghai", "2026-03-02", "2026-03-02"))
    assert set(plots) == {"hours"}
    bars = plots["hours"].bars
    assert [b.label for b in bars][:3] == ["00:00", "01:00", "02:00"] and len(bars) == 24
    assert [b.messages for b in bars] == list(range(1, 25))


def test_a_week_is_plotted_hour_after_hour_and_by_day():
    plots = charts(report("Asia/Shanghai", "2026-03-02", f"2026-03-{1 + TIMELINE_DAYS:02d}"))
    assert set(plots) == {"hours", "days"}
    assert len(plots["hours"].bars) == 24 * TIMELINE_DAYS and plots["hours"].bars[25].label == "03-03 01:00"
    assert len(plots["days"].bars) == TIMELINE_DAYS


@pytest.mark.parametrize(("zone", "days", "summer_hours"), [("Asia/Shanghai", 31, 0), ("Europe/Berlin", 31, -1)])
def test_over_a_week_the_hours_of_the_day_are_summed_over_its_days(zone, days, summer_hours):
    """March in Berlin has a day of 23 hours (2 o'clock never happens): that hour has a day less."""
    plots = charts(report(zone, "2026-03-01", "2026-03-31"))
    assert set(plots) == {"hours_of_day", "days"}
    bars = plots["hours_of_day"].bars
    assert [b.label for b in bars] == [f"{h:02d}:00" for h in range(24)]
    expected = [days * (h + 1) + (summer_hours * (h + 1) if h == 2 else 0) for h in range(24)]
    assert [b.messages for b in bars] == expected
    assert [b.conversations for b in bars][3] == days * 3
    assert len(plots["days"].bars) == days
