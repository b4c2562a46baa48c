"""memory_recall time windows: civil days in the shop's zone across DST days and leap years,
the widening ladder, hard explicit ranges, and input that never raises."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from runtime.memory.time_window import day_start, overlaps, time_query

SANTIAGO = ZoneInfo("America/Santiago")
SHANGHAI = ZoneInfo("Asia/Shanghai")


def to_ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


NOW = to_ms(datetime(2026, 11, 30, 12, tzinfo=SHANGHAI))
HOUR = 3_600_000


def test_a_day_whose_midnight_does_not_exist_starts_at_its_first_instant():
    # 2022-09-11 in Santiago: clocks jump from 00:00 to 01:00 (-04 -> -03).
    start = day_start(datetime(2022, 9, 11).date(), SANTIAGO)
    assert start == to_ms(datetime(2022, 9, 11, 1, tzinfo=SANTIAGO))  # 01:00 local, the first that exists
    [day, *_] = time_query("2022-09-11", None, SANTIAGO, NOW).windows
    assert day.end_ms - day.start_ms == 23 * HOUR  # a 23-hour civil day
    inside = to_ms(datetime(2022, 9, 11, 1, 30, tzinfo=SANTIAGO))
    before = to_ms(datetime(2022, 9, 10, 23, 59, tzinfo=SANTIAGO))
    assert overlaps(day, inside, inside) and not overlaps(day, before, before)
    # And the autumn change (2022-04-03, 00:00 -03 -> 23:00 -04 the day before): a 25-hour Saturday.
    [saturday, *_] = time_query("2022-04-02", None, SANTIAGO, NOW).windows
    assert saturday.end_ms - saturday.start_ms == 25 * HOUR


def test_a_single_day_widens_day_then_three_days_then_month_then_year():
    windows = time_query("2024-02-29", None, SHANGHAI, NOW).windows  # a leap day
    assert [w.level for w in windows] == ["day", "day3", "month", "year"]
    day, three, month, year = windows
    assert (day.end_ms - day.start_ms, three.end_ms - three.start_ms) == (24 * HOUR, 72 * HOUR)
    assert month.end_ms - month.start_ms == 29 * 24 * HOUR and year.end_ms - year.start_ms == 366 * 24 * HOUR
    assert not any(w.hard for w in windows)
    assert [w.level for w in time_query("2025-02", None, SHANGHAI, NOW).windows] == ["month", "year"]


def test_explicit_ranges_are_hard_swapped_grown_to_three_days_and_capped():
    [window] = time_query("2026-03-10", "2026-03-01", SHANGHAI, NOW).windows  # reversed
    assert window.hard and window.start_ms == to_ms(datetime(2026, 3, 1, tzinfo=SHANGHAI))
    assert window.end_ms == to_ms(datetime(2026, 3, 11, tzinfo=SHANGHAI))
    [short] = time_query("2026-03-05", "2026-03-05", SHANGHAI, NOW).windows
    assert short.end_ms - short.start_ms == 72 * HOUR  # grown around the day to three days
    [long] = time_query("2020", "2024", SHANGHAI, NOW).windows
    assert long.end_ms - long.start_ms == 366 * 24 * HOUR


def test_the_future_is_clamped_and_bad_input_means_no_constraint_with_a_warning():
    [future, *_] = time_query("2030-01-01", None, SHANGHAI, NOW).windows
    assert future.start_ms <= NOW
    for bad in ("2023-02-29", "yesterday", "2026-13"):
        query = time_query(bad, None, SHANGHAI, NOW)
        assert query.windows == [] and query.warnings
    assert time_query(None, "  ", SHANGHAI, NOW).windows == []


def test_epoch_milliseconds_are_the_civil_day_in_the_zone_and_granularity_widens():
    zone = ZoneInfo("Asia/Shanghai")
    now = int(datetime(2025, 12, 31, tzinfo=zone).timestamp() * 1000)
    late_evening_utc = int(
        datetime(2025, 3, 4, 17, 30, tzinfo=ZoneInfo("UTC")).timestamp() * 1000
    )  # 03-05 01:30 in Shanghai
    by_epoch = time_query(str(late_evening_utc), None, zone, now)
    assert by_epoch.windows == time_query("2025-03-05", None, zone, now).windows
    monthly = time_query("2025-03-05", None, zone, now, granularity="month")
    assert [w.level for w in monthly.windows] == ["month", "year"]
    assert time_query("2025-03", None, zone, now, granularity="day").windows[0].level == "month"  # never finer
