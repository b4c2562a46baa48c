"""`kefu report`: the console's reports in a terminal (or as its CSV), from the same figures
(runtime.operators.reports, whose docstring says what each one means)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from worker.cli.common import (
    N_,
    SourceOption,
    _,
    cli,
    console,
    current_settings,
    hint_simulation,
    open_store,
    operator_errors,
    print_table,
    report_source,
)

if TYPE_CHECKING:
    from runtime.operators.reports.figures import Figures, Report, Spread


@cli.command()
def report(
    first: Annotated[
        str | None, typer.Option("--from", help="the first day, YYYY-MM-DD in the shop's zone (default: --to's day)")
    ] = None,
    last: Annotated[str | None, typer.Option("--to", help="the last day, included (default: today)")] = None,
    source: SourceOption = "real",
    as_csv: Annotated[bool, typer.Option("--csv", help="the CSV the console downloads, on stdout")] = False,
) -> None:
    """Buyer messages, conversations, reply times, handoffs and resolves of a period (31 days at most)."""
    from runtime.operators.reports.export import report_csv
    from runtime.operators.reports.figures import build_report
    from runtime.operators.reports.periods import period_of

    kind = report_source(source)
    zone = current_settings().zone
    with operator_errors():
        period = period_of(zone, first, last)
        figures = build_report(open_store(), period, kind)
    if as_csv:
        print(report_csv(figures), end="")
        return
    _print(figures)
    if kind == "real" and figures.totals.messages == 0:
        hint_simulation(N_("buyer messages in this period"), "report")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = round(seconds)
    if whole < 60:
        return _("{seconds}s").format(seconds=whole)
    if whole < 3600:
        return _("{minutes}m{seconds}s").format(minutes=whole // 60, seconds=f"{whole % 60:02d}")
    return _("{hours}h{minutes}m").format(hours=whole // 3600, minutes=f"{whole % 3600 // 60:02d}")


def share(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _pair(spread: Spread) -> str:
    return _("{p50} / {p90} ({count} times)").format(
        p50=duration(spread.p50_s), p90=duration(spread.p90_s), count=spread.count
    )


def _totals(t: Figures) -> list[list[str]]:
    within = _("{share} ({within}/{judged})").format(
        share=share(t.within_3min_share), within=t.within_3min, judged=t.judged
    )
    return [
        [_("buyer messages"), str(t.messages)],
        [_("conversations"), str(t.conversations)],
        [_("waits / answered"), f"{t.waits} / {t.answered}"],
        [_("answered within 3 min"), within],
        [_("first response, auto, p50/p90"), _pair(t.first_response.auto)],
        [_("first response, human, p50/p90"), _pair(t.first_response.human)],
        [_("reply time, auto, p50/p90"), _pair(t.reply_time.auto)],
        [_("reply time, human, p50/p90"), _pair(t.reply_time.human)],
        [_("handoffs"), _("{count} ({share})").format(count=t.handoffs, share=share(t.handoff_rate))],
        [_("resolved"), str(t.resolved)],
    ]


def _print(report: Report) -> None:
    period = report.period
    who = _("real buyers") if report.source == "real" else _("simulated buyers")
    title = _("report: {who}, {first} to {last}").format(who=who, first=period.first_day, last=period.last_day)
    print_table(title, [N_("figure"), N_("value")], _totals(report.totals))
    days = [
        [
            str(d.day),
            str(d.messages),
            str(d.conversations),
            f"{d.waits}/{d.answered}",
            share(d.within_3min_share),
            f"{duration(d.first_response.auto.p50_s)}/{duration(d.first_response.human.p50_s)}",
            f"{duration(d.reply_time.auto.p50_s)}/{duration(d.reply_time.human.p50_s)}",
            str(d.handoffs),
            str(d.resolved),
        ]
        for d in report.days
    ]
    columns = [
        N_("day"),
        N_("messages"),
        N_("conversations"),
        N_("waits/answered"),
        N_("within 3 min"),
        N_("first response p50 auto/human"),
        N_("reply p50 auto/human"),
        N_("handoffs"),
        N_("resolved"),
    ]
    print_table(_("per day"), columns, days)
    one_day = len(report.days) == 1
    hours = [
        [h.start.strftime("%H:%M" if one_day else "%m-%d %H:%M"), str(h.messages), str(h.conversations)]
        for h in report.hours
        if one_day or h.messages
    ]
    hourly = _("per hour") if one_day else _("per hour (only hours with messages)")
    print_table(hourly, [N_("hour"), N_("messages"), N_("conversations")], hours)
    operators = [
        [o.operator or _("(command line, unsigned)"), str(o.replies), _pair(o.reply_time), str(o.resolved)]
        for o in report.operators
    ]
    if operators:
        columns = [N_("operator"), N_("messages sent"), N_("reply time p50/p90"), N_("resolved")]
        print_table(_("operators"), columns, operators)
    else:
        console.print(_("operators: none sent a message or resolved a conversation in this period"))
    console.print(
        _(
            "Time zone {zone}, figures as of {time}. A wait: a buyer's message after the shop's last reply,"
            " until the shop's next message that was sent; first response: each conversation's first wait of a day."
        ).format(zone=period.zone, time=report.as_of.strftime("%Y-%m-%d %H:%M")),
        style="dim",
        highlight=False,
    )
