"""SPEC 3.13: simulated rows never mix with real ones. `kefu status`, `kefu outbox`, `kefu
checkpoint` and `kefu memory report` show real accounts' rows by default and the simulated
ones with `--source simulation`; an empty real report names the simulated rows it left out."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner, Result

from config import Settings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.customers.summaries import simulated_customer_ids
from runtime.inbound.checkpoints import checkpoint_views
from runtime.inbound.ingest import ingest_page
from runtime.inbound.pages import parse_page
from runtime.memory.engine import scope_of
from runtime.memory.folders import ArchivedMessage, plan_folders
from runtime.memory.report import report as memory_report
from runtime.memory.store import MemoryStore
from runtime.operators.status import stage_counts
from runtime.outbox.requests import list_requests, register_outbound
from runtime.store import DeliveryStore
from runtime.store.tables import OutboundIntent
from worker.cli import cli

REAL = "ww-seller"  # a real platform's account (the `shop` fixture is the simulated one)


def page(account: str, op: str, conversation: str, count: int) -> dict:
    messages = [
        {
            "platform_message_id": f"{op}-{n}",
            "sender": {"id": "u", "display_name": "买家", "role": "buyer"},
            "content": {"type": "text", "text": f"第{n}个问题"},
            "occurred_at": "2026-11-30T06:05:00+00:00",
        }
        for n in range(count)
    ]
    group = {"conversation_id": conversation, "conversation_type": "direct", "messages": messages}
    return {"account_id": account, "stream_id": "s", "cursor": op, "page_op_id": op, "groups": [group]}


def buyer(store: DeliveryStore, account: str, messages: int, requests: int) -> int:
    """A conversation of `account` with `messages` buyer lines and `requests` operator sends."""
    [customer_id] = ingest_page(store, parse_page(page(account, f"{account}-p", f"{account}-c", messages))).customer_ids
    with store.write() as conn:
        for n in range(requests):
            intent = OutboundIntent(
                request_id=f"{account}-r{n}",
                customer_id=customer_id,
                account_id=account,
                conversation_id=f"{account}-c",
                recipient_id="u",
                origin="manual",
                body="您好",
            )
            register_outbound(conn, intent)
    return customer_id


def remember(settings: Settings, customer_id: int) -> None:
    memory = MemoryStore(settings.memory_path)
    said = [ArchivedMessage(role="user", text=f"订单A10{customer_id}什么时候发货？", at_ms=1)]
    memory.commit_archive(scope_of(customer_id), f"plan-{customer_id}", plan_folders(said))
    memory.close()


def run(kefu: CliRunner, *args: str) -> Result:
    result = kefu.invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def both(settings: Settings, store: DeliveryStore, shop: str) -> tuple[int, int]:
    """A real customer (3 messages, 1 request) and a simulated one (5 messages, 2 requests)."""
    create_account(store, AccountSpec(id=REAL, platform="wangwang", identity="cntaobao某店"))
    real, simulated = buyer(store, REAL, 3, 1), buyer(store, shop, 5, 2)
    remember(settings, real)
    remember(settings, simulated)
    return real, simulated


def test_the_runtime_reports_keep_each_source_to_itself(settings, store, shop, both):
    real, simulated = both
    with store.read() as conn:
        assert simulated_customer_ids(conn) == {simulated}
    counts = {source: {s.stage: s.counts for s in stage_counts(store, source)} for source in ("real", "simulation")}
    assert counts["real"]["inbound messages"] == {"pending": 3}
    assert counts["simulation"]["inbound messages"] == {"pending": 5}
    assert counts["real"]["outbox requests"] == {"pending": 1}
    assert counts["simulation"]["outbox requests"] == {"pending": 2}
    assert {s.stage: s.counts for s in stage_counts(store)}["inbound messages"] == {"pending": 8}  # both
    assert [r.request_id for r in list_requests(store, None, source="real")] == [f"{REAL}-r0"]
    assert {r.customer_id for r in list_requests(store, None, source="simulation")} == {simulated}
    assert [v.report.account_id for v in checkpoint_views(store, source="real")] == [REAL]
    assert [v.report.account_id for v in checkpoint_views(store, source="simulation")] == [shop]
    assert checkpoint_views(store, shop, source="real") == []  # a named account of the other source
    assert [r.scope for r in memory_report(settings.memory_path, without={simulated})] == [scope_of(real)]
    assert [r.scope for r in memory_report(settings.memory_path, only={simulated})] == [scope_of(simulated)]


def _count(output: str, stage: str) -> str:
    row = next(line for line in output.splitlines() if stage in line)
    return re.findall(r"\d+", row)[-1]


def test_status_counts_the_real_rows_unless_asked_for_the_simulated_ones(kefu, both):
    real = run(kefu, "status").output
    assert "kefu status · shard default · real" in real
    assert _count(real, "inbound messages") == "3" and _count(real, "outbox requests") == "1"
    assert re.search(rf"\b{REAL}\b", real) and not re.search(r"\bshop\b", real)  # the checkpoints too
    simulated = run(kefu, "status", "--source", "simulation").output
    assert _count(simulated, "inbound messages") == "5" and _count(simulated, "outbox requests") == "2"
    assert re.search(r"\bshop\b", simulated) and REAL not in simulated


def test_outbox_lists_one_source(kefu, both):
    real, simulated = both
    listed = json.loads(run(kefu, "outbox", "--json").output)
    assert [(r["request_id"], r["customer_id"]) for r in listed] == [(f"{REAL}-r0", real)]
    listed = json.loads(run(kefu, "outbox", "--source", "simulation", "--json").output)
    assert sorted(r["request_id"] for r in listed) == ["shop-r0", "shop-r1"]
    assert {r["customer_id"] for r in listed} == {simulated}


def test_checkpoint_reports_one_source(kefu, shop, both):
    real = run(kefu, "checkpoint").output
    assert re.search(rf"\b{REAL}\b", real) and not re.search(r"\bshop\b", real)
    simulated = run(kefu, "checkpoint", "--source", "simulation").output
    assert re.search(r"\bshop\b", simulated) and REAL not in simulated


def test_memory_report_shows_one_sources_customers(kefu, both):
    real, simulated = both
    assert [r["scope"] for r in json.loads(run(kefu, "memory", "report", "--json").output)] == [scope_of(real)]
    args = ("memory", "report", "--source", "simulation", "--json")
    assert [r["scope"] for r in json.loads(run(kefu, *args).output)] == [scope_of(simulated)]


def test_an_empty_real_report_names_the_simulated_rows_it_left_out(settings, store, shop, kefu):
    remember(settings, buyer(store, shop, 2, 1))
    hints = {
        ("status",): "kefu status --source simulation",
        ("outbox",): "kefu outbox --source simulation",
        ("checkpoint",): "kefu checkpoint --source simulation",
        ("memory", "report"): "kefu memory report --source simulation",
        ("customers",): "kefu customers --source simulation",
    }
    for args, hint in hints.items():
        shown = run(kefu, *args).output
        assert "no real" in shown and hint in shown, shown
        assert "no real" not in run(kefu, *args, "--source", "simulation").output


@pytest.mark.parametrize("args", [("status",), ("outbox",), ("checkpoint",), ("memory", "report"), ("customers",)])
def test_a_bad_source_is_refused_by_code(kefu, store, shop, args):
    refused = kefu.invoke(cli, [*args, "--source", "both"])
    assert refused.exit_code == 2 and "KEFU_INVALID_INPUT" in refused.output, refused.output
