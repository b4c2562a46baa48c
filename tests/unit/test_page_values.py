"""Values a page may carry (issue 35): a time, id or size no later step can handle is refused at
the door (the page model), or clamped where a transport converts a platform's raw number; and
a value that got stored anyway cannot wedge a turn."""

from __future__ import annotations

import logging
import math
import time
from datetime import UTC, datetime

import pytest

from runtime.admission.batches import evaluate
from runtime.agent.rendering import shop_time
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.turn import run_turn
from runtime.errors import PageRejected
from runtime.inbound.ingest import ingest_page
from runtime.inbound.pages import MAX_DURATION_MS, parse_page, platform_time
from tests.unit.test_ingest import group, message, page_dict

YEAR_9999_MS = 253_402_300_799_000  # 9999-12-31T23:59:59Z
YEAR_1_MS = -62_135_596_800_000  # 0001-01-01T00:00:00Z


def page_with(**fields: object) -> dict:
    m = message("m1")
    m.update(fields)
    return page_dict(groups=[group("conv-1", [m])])


@pytest.mark.parametrize(
    "occurred_at",
    [
        "0001-01-01T00:00:00+00:00",
        "9999-12-31T23:59:59+00:00",
        "1969-12-31T23:59:59+00:00",
        "2100-01-01T00:00:00+00:00",
        "3000-06-01T00:00:00+08:00",
        YEAR_9999_MS,  # a number: pydantic reads one this large as ms
        "NaN",
        "inf",
        float("nan"),
        10**20,
        "2026-11-30T06:05:00",  # naive: no zone, no way to place it
    ],
)
def test_a_time_no_later_step_can_handle_is_refused_naming_the_field(occurred_at):
    with pytest.raises(PageRejected) as refused:
        parse_page(page_with(occurred_at=occurred_at))
    assert refused.value.code == "KEFU_PAGE_INVALID"
    assert any(p.startswith("groups.0.messages.0.occurred_at:") for p in refused.value.problems)


@pytest.mark.parametrize(
    "occurred_at", ["1970-01-01T00:00:00+00:00", "2099-12-31T11:59:59-12:00", "2026-11-30T06:05:00Z"]
)
def test_times_in_range_pass_and_survive_the_shops_zone(occurred_at, settings):
    page = parse_page(page_with(occurred_at=occurred_at))
    at = page.groups[0].messages[0].occurred_at
    assert at.astimezone(settings.zone).year in (1970, 1969, 2099, 2100, 2026)
    assert page.model_dump_json()  # JSON, as the broker carries it


def test_out_of_range_refusals_say_their_code():
    with pytest.raises(PageRejected) as refused:
        parse_page(page_with(occurred_at="9999-12-31T23:59:59+00:00"))
    assert "KEFU_PAGE_TIME_OUT_OF_RANGE" in str(refused.value)


@pytest.mark.parametrize("duration", [-1, MAX_DURATION_MS + 1, 2**63, 10**30])
def test_sizes_beyond_an_int_every_step_holds_are_refused(duration):
    with pytest.raises(PageRejected) as refused:
        parse_page(page_with(content={"type": "voice", "recognition": "你好", "duration_ms": duration}))
    assert any("content.voice.duration_ms" in p for p in refused.value.problems)


def test_a_size_at_the_limit_passes():
    parse_page(page_with(content={"type": "voice", "recognition": "你好", "duration_ms": MAX_DURATION_MS}))


@pytest.mark.parametrize("field", ["platform_message_id", "direct_peer_id"])
def test_huge_ids_are_refused(field):
    with pytest.raises(PageRejected) as refused:
        parse_page(page_with(**{field: "x" * 100_000}))
    assert any(field in p for p in refused.value.problems)


@pytest.mark.parametrize("ms", [YEAR_9999_MS, YEAR_1_MS, -1, 10**20, math.nan, math.inf, -math.inf])
def test_a_platforms_time_kefu_cannot_keep_is_taken_as_received_now(ms, caplog, monkeypatch):
    logger = logging.getLogger("runtime.inbound.pages")  # heard directly: another test's logging setup may
    monkeypatch.setattr(logger, "disabled", False)  # have disabled it, raised its level or stopped
    monkeypatch.setattr(logger, "level", logging.WARNING)  # its propagation
    logger.addHandler(caplog.handler)
    try:
        before = datetime.now(tz=UTC).replace(microsecond=0)  # kefu keeps times to the millisecond
        at = platform_time(ms, "occurred_at")
    finally:
        logger.removeHandler(caplog.handler)
    assert before <= at <= datetime.now(tz=UTC)
    assert "KEFU_PAGE_TIME_OUT_OF_RANGE" in caplog.text and "occurred_at" in caplog.text


def test_a_platforms_time_in_range_is_kept():
    assert platform_time(1_796_018_700_000, "occurred_at") == datetime.fromtimestamp(1_796_018_700, tz=UTC)


def test_a_simulated_buyer_message_dated_9999_is_ingested_and_answered(store, shop, transport, platform, settings):
    message_ = platform.buyer_says("shop", "b1", "买家b1", "什么时候发货")
    dated = message_.model_copy(update={"occurred_at": YEAR_9999_MS})
    result = ingest_page(store, transport.page_of("shop", [dated]))
    customer = result.customer_ids[0]
    evaluate(store, customer, batch_size=1000)
    turn = run_turn(
        store, RulesProvider(load_knowledge(None)), customer, settings.sessions_dir, settings.zone, settings.agent
    )
    assert turn is not None and turn.outcome != "waiting"
    with store.read() as conn:
        occurred = conn.execute("SELECT occurred_at FROM inbound_message").scalar_one()
        states = conn.execute("SELECT state FROM admission_batch").scalars().all()
    assert abs(occurred - time.time() * 1000) < 60_000  # clamped to its receipt
    assert "claimed" not in states


@pytest.mark.parametrize("stored", [YEAR_9999_MS, YEAR_1_MS, 2**62])
def test_a_time_stored_out_of_range_cannot_wedge_a_turn(store, shop, transport, platform, settings, stored):
    """As if an older kefu had stored it: the turn still ends, and the batch is not left claimed."""
    message_ = platform.buyer_says("shop", "b1", "买家b1", "什么时候发货")
    customer = ingest_page(store, transport.page_of("shop", [message_])).customer_ids[0]
    with store.write() as conn:
        conn.execute("UPDATE inbound_message SET occurred_at = ?, received_at = ?", (stored, stored))
    evaluate(store, customer, batch_size=1000)
    run_turn(store, RulesProvider(load_knowledge(None)), customer, settings.sessions_dir, settings.zone, settings.agent)
    with store.read() as conn:
        states = conn.execute("SELECT state FROM admission_batch").scalars().all()
    assert states and "claimed" not in states


@pytest.mark.parametrize("stored", [YEAR_9999_MS, YEAR_1_MS, 2**62, -(2**62)])
def test_shop_time_never_raises(stored, settings):
    assert shop_time(stored, settings.zone)
