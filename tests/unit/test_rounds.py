"""Rounds for salvage (seed 000): each turn with its status, settled (complete or interrupted)
apart from successful (complete), and the unfinished ones (pending or error: what salvage closes)
of a shop-local day, also across a DST change."""

from __future__ import annotations

import json
from datetime import date, datetime
from zoneinfo import ZoneInfo

import pytest
from typer.testing import CliRunner

from config import load_settings
from runtime.agent.rounds import is_settled, is_successful, local_day_bounds, rounds
from runtime.agent.session_log import SessionLog
from runtime.agent.sessions import session_path
from worker.celery_app import app
from worker.cli import cli

NEW_YORK = ZoneInfo("America/New_York")  # springs forward on 2026-03-08: that day has 23 hours


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def turn(log: SessionLog, name: str, started: str, outcome: str | None, reason: str | None = None) -> None:
    at = ms(started)
    log.append("turn/start", at=at, turn=name, batch_id=f"b-{name}", kind="batch")
    if outcome is not None:
        log.append("turn/end", at=at + 1000, turn=name, outcome=outcome, **({"reason": reason} if reason else {}))
    log.flush()


@pytest.fixture
def shop(tmp_path):
    return load_settings(data_dir=tmp_path / "var", timezone="America/New_York")


@pytest.fixture
def sessions(shop):
    folder = shop.sessions_dir
    first = SessionLog(session_path(folder, "s1-1"))
    turn(first, "t0", "2026-03-08T00:30:00-05:00", "complete")  # just after local midnight (EST)
    turn(first, "t2", "2026-03-08T23:30:00-04:00", "error")  # 03:30 UTC on the 9th; out of steps
    second = SessionLog(session_path(folder, "s2-1"))
    turn(second, "t0", "2026-03-08T12:00:00-04:00", "interrupted", "handling-paused")  # a settled stop
    turn(second, "t4", "2026-03-08T12:05:00-04:00", None)  # a crash left it open
    turn(second, "t6", "2026-03-09T00:10:00-04:00", None)  # the next local day
    return folder


def test_a_local_day_across_the_dst_change_has_23_hours():
    start, end = local_day_bounds(date(2026, 3, 8), NEW_YORK)
    assert (end - start) / 3_600_000 == 23


def test_the_unfinished_rounds_of_a_local_day_are_listed_for_salvage(sessions):
    everything = rounds(sessions)
    assert [(r.customer_id, r.turn, r.status, r.settled) for r in everything] == [
        (1, "t0", "complete", True),
        (2, "t0", "interrupted", True),
        (2, "t4", "pending", False),
        (1, "t2", "error", False),
        (2, "t6", "pending", False),
    ]
    assert everything[1].reason == "handling-paused"
    unfinished = rounds(sessions, unfinished=True, day=date(2026, 3, 8), zone=NEW_YORK)
    # pending and error, never the interrupted one (a settled stop); not filed under the UTC date
    assert [(r.customer_id, r.turn, r.status) for r in unfinished] == [(2, "t4", "pending"), (1, "t2", "error")]
    assert [r.turn for r in rounds(sessions, customer_id=2, unfinished=True)] == ["t4", "t6"]
    assert [(is_settled(s), is_successful(s)) for s in ("pending", "complete", "error", "interrupted")] == [
        (False, False),
        (True, True),
        (False, False),  # failed: not context until salvage closes it
        (True, False),  # ended normally, yet not a success
    ]


def test_kefu_rounds_lists_them_and_refuses_a_bad_day(shop, sessions, monkeypatch):
    monkeypatch.setattr(app, "kefu_settings", shop, raising=False)
    listed = CliRunner().invoke(cli, ["rounds", "--unfinished", "--day", "2026-03-08", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [(r["customer_id"], r["turn"], r["status"]) for r in json.loads(listed.output)] == [
        (2, "t4", "pending"),
        (1, "t2", "error"),
    ]
    alias = CliRunner().invoke(cli, ["rounds", "--interrupted", "--day", "2026-03-08", "--json"])  # the seed's name
    assert alias.exit_code == 0 and json.loads(alias.output) == json.loads(listed.output)
    bad = CliRunner().invoke(cli, ["rounds", "--day", "08/03/2026"])
    assert bad.exit_code == 2 and "KEFU_INVALID_INPUT" in bad.output
