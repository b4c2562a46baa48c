"""The console's reports (issue 41, item 4): buyer messages, conversations, reply times, handoffs
and resolves of a period, as a page with plots and as a CSV. The figures are
runtime.operators.reports' (their definitions are in its docstring), the same `kefu report`
prints; this module only reads the request, asks for them and lays the plots out for the
template, which draws them as inline SVG (no script: the console's content policy allows none
inline, and a chart needs none).

Any signed-in operator may read them (viewer and up)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from runtime.customers.summaries import Source, parse_source
from runtime.operators.reports.export import report_csv
from runtime.operators.reports.figures import Report, build_report
from runtime.operators.reports.periods import period_of
from runtime.operators.roles import Role
from worker.console.auth import require, signed_in
from worker.console.context import console_of

CHART_WIDTH, CHART_HEIGHT = 720.0, 160.0
TIMELINE_DAYS = 7  # the longest period whose hours are plotted one after another


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str  # its hour or day; with its values, the bar's tooltip (in the template's words)
    messages: int
    conversations: int


@dataclass
class Chart:
    """Bars (buyer messages) and a line (conversations) on one scale: a bucket's conversations
    are never more than its messages."""

    top: int  # the value at the top of the plot
    bars: list[Bar] = field(default_factory=list)
    line: str = ""  # the polyline's points
    ticks: list[tuple[float, str]] = field(default_factory=list)  # (x, label) under the plot
    width: float = CHART_WIDTH
    height: float = CHART_HEIGHT


def chart(buckets: list[tuple[str, int, int]], every: int = 1) -> Chart:
    """`buckets`: (label, messages, conversations) in order; every `every`-th label is shown."""
    top = max([messages for _, messages, _ in buckets] + [1])
    step = CHART_WIDTH / max(len(buckets), 1)
    drawn = Chart(top=top)
    points = []
    for index, (label, messages, conversations) in enumerate(buckets):
        x = index * step
        height = CHART_HEIGHT * messages / top
        drawn.bars.append(
            Bar(
                round(x + step * 0.1, 2),
                round(CHART_HEIGHT - height, 2),
                round(step * 0.8, 2),
                round(height, 2),
                label,
                messages,
                conversations,
            )
        )
        points.append(f"{x + step / 2:.2f},{CHART_HEIGHT - CHART_HEIGHT * conversations / top:.2f}")
        if index % every == 0:
            drawn.ticks.append((round(x + step / 2, 2), label))
    drawn.line = " ".join(points)
    return drawn


def charts(report: Report) -> dict[str, Chart]:
    """The hourly plot and, for a period of several days, the daily one. Up to a week the hours
    are drawn in order (labelled every 3 hours of a day, or at each day's start); over a week
    an hour's bar would be thinner than a pixel, so the hours of the day are drawn instead, each
    the sum over the period's days: when buyers write, which is what a rota is planned on."""
    days = len(report.days)
    if days == 1:
        hourly = [(hour.start.strftime("%H:%M"), hour.messages, hour.conversations) for hour in report.hours]
        return {"hours": chart(hourly, every=3)}
    plots = {
        "days": chart(
            [(d.day.strftime("%m-%d"), d.messages, d.conversations) for d in report.days], every=max(1, days // 10)
        )
    }
    if days <= TIMELINE_DAYS:
        hourly = [(hour.start.strftime("%m-%d %H:%M"), hour.messages, hour.conversations) for hour in report.hours]
        plots["hours"] = chart(hourly, every=24)
    else:
        sums = {hour: [0, 0] for hour in range(24)}
        for hour in report.hours:  # a day of 23 or 25 hours (summer time) still has hours 0-23
            sums[hour.start.hour][0] += hour.messages
            sums[hour.start.hour][1] += hour.conversations
        plots["hours_of_day"] = chart([(f"{h:02d}:00", m, c) for h, (m, c) in sums.items()], every=3)
    return plots


def spoken_duration(seconds: float | None, gettext: Callable[[str], str]) -> str:
    """A reply time as the page says it, in the console's language: a filter (`| duration`)
    rather than a template macro, as a month's page says some 150 of them."""
    if seconds is None:
        return "—"
    whole = int(seconds + 0.5)  # halves up, as the page always rounded
    if whole < 60:
        return gettext("%(s)s s") % {"s": whole}
    if whole < 3600:
        return gettext("%(m)s min %(s)s s") % {"m": whole // 60, "s": whole % 60}
    return gettext("%(h)s h %(m)s min") % {"h": whole // 3600, "m": whole % 3600 // 60}


def _asked(request: Request) -> tuple[Report, Source]:
    console = console_of(request)
    params = request.query_params
    zone = console.runtime.settings.zone
    period = period_of(zone, params.get("from") or None, params.get("to") or None)
    source = parse_source(params.get("source") or "real")
    return build_report(console.store, period, source), source


def reports_page(request: Request) -> Response:
    console = console_of(request)
    operator = signed_in(request, console.store)
    if operator is None:
        return RedirectResponse("/login", status_code=303)
    require(operator, Role.VIEWER)
    report, source = _asked(request)
    query = {"from": report.period.first_day.isoformat(), "to": report.period.last_day.isoformat(), "source": source}
    return console.page(request, "reports.html", operator, report=report, charts=charts(report), query=query)


def reports_csv(request: Request) -> Response:
    require(signed_in(request, console_of(request).store), Role.VIEWER)
    report, source = _asked(request)
    period = report.period
    name = f"kefu-report-{source}-{period.first_day.isoformat()}-{period.last_day.isoformat()}.csv"
    # With a byte order mark: a spreadsheet opened on a Chinese desktop then reads UTF-8.
    return Response(
        ("\ufeff" + report_csv(report)).encode(),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


def report_routes() -> list[Route]:
    """The page and its CSV, for the console's routes (worker.console.app)."""
    return [Route("/reports", reports_page, methods=["GET"]), Route("/reports.csv", reports_csv, methods=["GET"])]
