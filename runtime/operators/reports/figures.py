"""A report's figures, read from the facts' summaries (runtime.operators.reports.facts) after a
catch-up: what the console's page and CSV and `kefu report` show alike. The definitions are in
the package's docstring.

A report reads a few rows per hour and day of its period whatever the traffic: V24's
summaries. The reply times are the most of it (a day's are a few hundred counts by origin and
reply time, a month's 10^4), so they come as one row per day and origin of JSON arrays and are
counted with bisect and accumulate rather than row by row."""

from __future__ import annotations

import json
import math
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Sequence
from datetime import date, datetime
from itertools import accumulate, groupby
from operator import itemgetter
from typing import Any

from pydantic import BaseModel, computed_field

from runtime.customers.summaries import Source
from runtime.operators.reports.facts import catch_up
from runtime.operators.reports.periods import Period, local
from runtime.store import DeliveryStore, now_ms
from runtime.store.queries import reply_wait, report_activity, report_event, report_reply_time

WITHIN_MS = 3 * 60 * 1000  # "answered within 3 minutes"
ORIGINS = ("auto", "manual")  # a reply's; the figures say "human" for manual


class Spread(BaseModel):
    """How long buyers waited (seconds): how many waits, their median and 90th percentile
    (nearest rank: the value at rank ⌈p·n⌉ of the sorted waits, one a buyer really had, as
    facts.reply_seconds counts it)."""

    count: int = 0
    p50_s: float | None = None
    p90_s: float | None = None


class ByOrigin(BaseModel):
    """Waits ended by the agent's reply (auto) and by an operator's (human), apart."""

    auto: Spread = Spread()
    human: Spread = Spread()


class Figures(BaseModel):
    """A day's figures, or the whole period's."""

    messages: int = 0  # buyer messages
    conversations: int = 0  # customers with a buyer message
    waits: int = 0  # waits begun
    answered: int = 0  # of them, ended by a reply sent
    within_3min: int = 0  # of them, within 3 minutes
    judged: int = 0  # answered, or still waiting for over 3 minutes: what the share is of
    first_response: ByOrigin = ByOrigin()  # each conversation's first wait of a day
    reply_time: ByOrigin = ByOrigin()  # every wait
    handoffs: int = 0  # conversations the agent handed to a human
    resolved: int = 0  # conversations an operator resolved

    @computed_field  # type: ignore[prop-decorator]
    @property
    def within_3min_share(self) -> float | None:
        return self.within_3min / self.judged if self.judged else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def handoff_rate(self) -> float | None:
        return self.handoffs / self.conversations if self.conversations else None


class DayFigures(Figures):
    day: date


class HourFigures(BaseModel):
    start: datetime  # in the shop's zone
    messages: int
    conversations: int


class OperatorFigures(BaseModel):
    operator: str | None  # None: manual replies sent unnamed (from the CLI)
    replies: int  # messages sent in the period
    reply_time: Spread  # of the waits begun in the period that their reply ended
    resolved: int  # conversations resolved in the period


class Report(BaseModel):
    source: Source
    period: Period
    as_of: datetime  # unanswered waits are judged as of this time
    totals: Figures
    days: list[DayFigures]
    hours: list[HourFigures]
    operators: list[OperatorFigures]


class Counted:
    """Waits counted by reply time (whole seconds, rounded up): the reply times in increasing
    order and the waits up to and including each."""

    def __init__(self, seconds: Sequence[int] = (), waits: Sequence[int] = ()) -> None:
        self.seconds = list(seconds)
        self.upto_each = list(accumulate(waits))

    @classmethod
    def of_json(cls, seconds_json: str, *waits_json: str) -> list[Counted]:
        """Counts from JSON arrays of reply times and of waits at each (one Counted per waits
        array), put in reply-time order if they came in another."""
        seconds, columns = json.loads(seconds_json), [json.loads(waits) for waits in waits_json]
        if seconds != sorted(seconds):  # in the table's order, but an aggregate's order is not promised
            order = sorted(range(len(seconds)), key=seconds.__getitem__)
            seconds, columns = [seconds[i] for i in order], [[column[i] for i in order] for column in columns]
        return [cls(seconds, column) for column in columns]

    @property
    def waits(self) -> int:
        return self.upto_each[-1] if self.upto_each else 0

    def within(self, seconds: float) -> int:
        """The waits answered in at most `seconds`."""
        index = bisect_right(self.seconds, seconds)
        return self.upto_each[index - 1] if index else 0


def spread(parts: Sequence[Counted]) -> Spread:
    """The spread of the waits of all `parts` (a period's days, say), without merging them: a
    percentile is the least reply time with enough waits at or under it, found by bisection
    over their reply times (~10 steps of a bisect per part, where a merge takes a step per count)."""
    total = sum(part.waits for part in parts)
    if not total:
        return Spread()
    if len(parts) == 1:  # its own order: the waits up to each reply time say where a rank is
        [part] = parts
        p50, p90 = (part.seconds[bisect_left(part.upto_each, max(math.ceil(p * total), 1))] for p in (0.5, 0.9))
        return Spread(count=total, p50_s=float(p50), p90_s=float(p90))
    times = sorted(set().union(*(part.seconds for part in parts)))

    def reached(rank: int) -> int:  # the least reply time with `rank` waits at or under it
        low, high = 0, len(times) - 1
        while low < high:
            middle = (low + high) // 2
            if sum(part.within(times[middle]) for part in parts) >= rank:
                high = middle
            else:
                low = middle + 1
        return times[low]

    p50, p90 = (reached(max(math.ceil(p * total), 1)) for p in (0.5, 0.9))
    return Spread(count=total, p50_s=float(p50), p90_s=float(p90))


def build_report(store: DeliveryStore, period: Period, source: Source = "real") -> Report:
    """The period's figures of one source (real and simulated rows never mix), the facts first
    brought up to the store's rows (in the period's zone: the shop's)."""
    catch_up(store, period.tz)
    at = now_ms()
    params = {"from": period.start, "to": period.end, "sim": source == "simulation"}
    with store.read() as conn:
        hours = conn.execute(report_activity.HOURS, params).all()
        conversations = int(conn.execute(report_activity.CONVERSATIONS, params).scalar_one())
        daily = {int(d): int(n) for d, n in conn.execute(report_activity.DAYS, params)}
        reply_times = conn.execute(report_reply_time.BY_DAY, params).all()
        took = conn.execute(reply_wait.OPERATOR_TIMES, params).all()
        waiting = [int(w) for w in conn.execute(reply_wait.OPEN_WAITS, params).scalars()]
        replies = {o or None: int(n) for o, n in conn.execute(reply_wait.MANUAL_REPLIES, params)}
        handoffs = conn.execute(report_event.HANDOFFS, params).all()
        resolves = conn.execute(report_event.RESOLVES, params).all()
    days = period.days()
    by_day, total = _tallies([start for _, start in days], hours, waiting, handoffs, resolves, at - WITHIN_MS)
    _reply_times(reply_times, by_day, total)
    counted = {int(h): (int(m), int(c)) for h, m, c in hours}
    return Report(
        source=source,
        period=period,
        as_of=local(at, period.tz),
        totals=Figures(**total.counts(conversations)),
        days=[DayFigures(day=day, **by_day[start].counts(daily.get(start, 0))) for day, start in days],
        hours=[
            HourFigures(
                start=local(h, period.tz), messages=counted.get(h, (0, 0))[0], conversations=counted.get(h, (0, 0))[1]
            )
            for h in period.hours()
        ],
        operators=_operators(took, replies, resolves),
    )


def _tallies(
    starts: list[int],
    hours: Sequence[Sequence[int]],
    waiting: list[int],
    handoffs: Sequence[Sequence[int]],
    resolves: Sequence[Sequence[Any]],
    late_before: int,
) -> tuple[dict[int, _Tally], _Tally]:
    """Each day's tally (by its start) and the period's, but for the answered waits: from the
    hours, the open waits' starts, the handoffs and the resolves, each in time order."""
    messages = [int(m) for _, m, _ in hours]
    handed_off, resolved = [c for c, _ in handoffs], [c for _, c, _ in resolves]
    cuts = {
        name: _day_cuts(starts, times)
        for name, times in (
            ("hours", [int(h) for h, _, _ in hours]),
            ("waiting", waiting),
            ("handoffs", [int(w) for _, w in handoffs]),
            ("resolves", [int(w) for _, _, w in resolves]),
        )
    }
    by_day: dict[int, _Tally] = {}
    for index, start in enumerate(starts):
        tally = by_day[start] = _Tally()
        tally.messages = sum(messages[cuts["hours"][index]])
        opened = cuts["waiting"][index]
        tally.open = opened.stop - opened.start
        tally.open_late = bisect_left(waiting, late_before, opened.start, opened.stop) - opened.start
        tally.handed_off = set(handed_off[cuts["handoffs"][index]])
        tally.resolved = set(resolved[cuts["resolves"][index]])
    total = _Tally()
    total.messages, total.open = sum(messages), len(waiting)
    total.open_late = bisect_left(waiting, late_before)  # begun before: waiting over 3 minutes
    total.handed_off, total.resolved = set(handed_off), set(resolved)
    return by_day, total


def _day_cuts(starts: list[int], times: list[int]) -> list[slice]:
    """For each day (by its start, in order), the part of `times` (in order) on it."""
    cuts = [bisect_left(times, start) for start in starts] + [len(times)]
    return [slice(first, end) for first, end in zip(cuts, cuts[1:], strict=False)]


def _reply_times(rows: Sequence[Sequence[Any]], by_day: dict[int, _Tally], total: _Tally) -> None:
    """Each day's answered waits (report_reply_time.BY_DAY's rows) into its tally and the
    period's (which keeps the days' counts apart: `spread` needs no merge)."""
    for day, origin, seconds_json, waits_json, firsts_json in rows:
        every, first = Counted.of_json(seconds_json, waits_json, firsts_json)
        tally = by_day[int(day)]
        for into in (tally, total):
            into.replies[origin].append(every)
            into.first[origin].append(first)


class _Tally:
    """What a day's or the period's figures are counted from."""

    def __init__(self) -> None:
        self.messages = self.open = self.open_late = 0
        self.first: dict[str, list[Counted]] = {o: [] for o in ORIGINS}  # each conversation's first wait of a day
        self.replies: dict[str, list[Counted]] = {o: [] for o in ORIGINS}  # every wait
        self.handed_off: set[int] = set()
        self.resolved: set[int] = set()

    def counts(self, conversations: int) -> dict[str, Any]:
        """The Figures fields (a day's conversations are counted apart: a buyer is one a day)."""
        parts = [part for origin in ORIGINS for part in self.replies[origin]]
        answered = sum(part.waits for part in parts)
        within = sum(part.within(WITHIN_MS / 1000) for part in parts)
        first = {origin: spread(self.first[origin]) for origin in ORIGINS}
        every = {origin: spread(self.replies[origin]) for origin in ORIGINS}
        return {
            "messages": self.messages,
            "conversations": conversations,
            "waits": answered + self.open,
            "answered": answered,
            "within_3min": within,
            "judged": answered + self.open_late,
            "first_response": ByOrigin(auto=first["auto"], human=first["manual"]),
            "reply_time": ByOrigin(auto=every["auto"], human=every["manual"]),
            "handoffs": len(self.handed_off),
            "resolved": len(self.resolved),
        }


def _operators(
    took_rows: Sequence[Sequence[Any]], replies: dict[str | None, int], resolves: Sequence[Sequence[Any]]
) -> list[OperatorFigures]:
    took: dict[str | None, list[Counted]] = {}
    for operator, group in groupby((row for row in took_rows if row[2]), key=itemgetter(0)):
        times = list(group)  # reply_wait.OPERATOR_TIMES: an operator's, in reply-time order
        took[operator or None] = [Counted([seconds for _, seconds, _ in times], [waits for _, _, waits in times])]
    resolved: dict[str | None, set[int]] = defaultdict(set)
    for operator, customer, _ in resolves:
        resolved[operator].add(customer)
    names = set(took) | set(replies) | set(resolved)
    rows = [
        OperatorFigures(
            operator=name,
            replies=replies.get(name, 0),
            reply_time=spread(took.get(name, [])),
            resolved=len(resolved[name]),
        )
        for name in names
    ]
    return sorted(rows, key=lambda row: (-row.replies, -row.resolved, row.operator is None, row.operator or ""))
