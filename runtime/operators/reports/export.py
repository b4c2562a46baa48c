"""A report as CSV, one row per hour, day and operator and one for the whole period, for a
spreadsheet: the same figures as the page and the terminal, durations in seconds."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

from runtime.operators.reports.figures import Figures, Report, Spread

COLUMNS = [
    "kind",  # period, day, hour or operator
    "start",  # in the shop's zone, with its offset
    "end",
    "operator",
    "buyer_messages",
    "conversations",
    "waits",
    "answered",
    "answered_within_3min",
    "within_3min_share",
    "first_response_auto_p50_s",
    "first_response_auto_p90_s",
    "first_response_human_p50_s",
    "first_response_human_p90_s",
    "reply_auto_p50_s",
    "reply_auto_p90_s",
    "reply_human_p50_s",
    "reply_human_p90_s",
    "handoffs",
    "handoff_rate",
    "resolved",
    "replies_sent",
    "reply_p50_s",
    "reply_p90_s",
]


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def _figures(figures: Figures) -> dict[str, str]:
    first, reply = figures.first_response, figures.reply_time
    return {
        "buyer_messages": str(figures.messages),
        "conversations": str(figures.conversations),
        "waits": str(figures.waits),
        "answered": str(figures.answered),
        "answered_within_3min": str(figures.within_3min),
        "within_3min_share": _ratio(figures.within_3min_share),
        "first_response_auto_p50_s": _number(first.auto.p50_s),
        "first_response_auto_p90_s": _number(first.auto.p90_s),
        "first_response_human_p50_s": _number(first.human.p50_s),
        "first_response_human_p90_s": _number(first.human.p90_s),
        "reply_auto_p50_s": _number(reply.auto.p50_s),
        "reply_auto_p90_s": _number(reply.auto.p90_s),
        "reply_human_p50_s": _number(reply.human.p50_s),
        "reply_human_p90_s": _number(reply.human.p90_s),
        "handoffs": str(figures.handoffs),
        "handoff_rate": _ratio(figures.handoff_rate),
        "resolved": str(figures.resolved),
    }


def _at(moment: datetime) -> str:
    return moment.isoformat(timespec="minutes")


def report_csv(report: Report) -> str:
    zone = report.period.tz
    out = io.StringIO()
    writer = csv.DictWriter(out, COLUMNS, restval="", lineterminator="\r\n")
    writer.writeheader()
    start = datetime.fromtimestamp(report.period.start / 1000, zone)
    end = datetime.fromtimestamp(report.period.end / 1000, zone)
    writer.writerow({"kind": "period", "start": _at(start), "end": _at(end), **_figures(report.totals)})
    for day in report.days:
        begins = datetime.combine(day.day, datetime.min.time(), tzinfo=zone)
        ends = datetime.combine(day.day + timedelta(days=1), datetime.min.time(), tzinfo=zone)
        writer.writerow({"kind": "day", "start": _at(begins), "end": _at(ends), **_figures(day)})
    for hour in report.hours:
        writer.writerow(
            {
                "kind": "hour",
                "start": _at(hour.start),
                "end": _at((hour.start.astimezone(UTC) + timedelta(hours=1)).astimezone(zone)),
                "buyer_messages": str(hour.messages),
                "conversations": str(hour.conversations),
            }
        )
    for row in report.operators:
        writer.writerow(
            {
                "kind": "operator",
                "start": _at(start),
                "end": _at(end),
                "operator": row.operator or "",
                "resolved": str(row.resolved),
                "replies_sent": str(row.replies),
                **_spread(row.reply_time),
            }
        )
    return out.getvalue()


def _spread(spread: Spread) -> dict[str, str]:
    return {"reply_p50_s": _number(spread.p50_s), "reply_p90_s": _number(spread.p90_s)}
