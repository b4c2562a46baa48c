"""Salvage (seed 000): rounds a crash left pending are closed as interrupted under the customer's
writer lease, with the closers the next turn would append; a round whose turn runs now is left
alone, and salvaging again finds nothing."""

from __future__ import annotations

import json

import pytest

from runtime.admission.batches import evaluate
from runtime.agent.rounds import rounds, salvage
from runtime.agent.turn import run_turn
from runtime.inbound.ingest import ingest_page
from runtime.ports import AssistantReply, ToolCall
from runtime.store.leases import held
from worker.cli import cli


class CrashesMidTurn:
    """A model that asks for a reply, then a call that never returns: the process dies there (as
    under SIGKILL), leaving the round open in the log (its first call's tool call was flushed
    before the tool ran)."""

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, messages, tools):
        self.calls += 1
        if self.calls == 1:
            return AssistantReply(
                text="", tool_calls=[ToolCall(id="c1", name="im_send_message", arguments='{"text": "您好"}')]
            )
        raise SystemExit("killed")


def test_salvage_closes_a_crashed_round_as_interrupted_and_leaves_a_busy_one(
    kefu, store, settings, shop, transport, platform
):
    crashed = []
    for buyer in ("b1", "b2"):
        message = platform.buyer_says("shop", buyer, buyer, "什么时候发货？")
        customer = ingest_page(store, transport.page_of("shop", [message])).customer_ids[0]
        evaluate(store, customer, 1000)
        with pytest.raises(SystemExit):
            run_turn(store, CrashesMidTurn(), customer, settings.sessions_dir, settings.zone, settings.agent)
        crashed.append(customer)
    assert [r.status for r in rounds(settings.sessions_dir, unfinished=True)] == ["pending", "pending"]
    with held(store, f"customer:{crashed[1]}", 60) as fence:  # b2's turn is running (again) now
        assert fence is not None
        salvaged = kefu.invoke(cli, ["rounds", "--interrupted", "--salvage", "--json", "--source", "simulation"])
    assert salvaged.exit_code == 0, salvaged.output
    report = json.loads(salvaged.output[salvaged.output.index("[") :])
    assert [(r["customer_id"], r["outcome"], r["batch_open"]) for r in report] == [
        (crashed[0], "closed", True),
        (crashed[1], "busy", True),
    ]
    after = {r.customer_id: r for r in rounds(settings.sessions_dir)}
    assert (after[crashed[0]].status, after[crashed[1]].status) == ("interrupted", "pending")
    again = salvage(store, settings.sessions_dir, rounds(settings.sessions_dir, customer_id=crashed[0]), 60)
    assert again == []  # nothing pending is left to close: idempotent


class KeepsLooking:
    """A model that only ever reads the history: the turn runs out of steps without an answer."""

    def complete(self, messages, tools):
        return AssistantReply(text="", tool_calls=[ToolCall(id="h", name="im_query_history", arguments="{}")])


class Answers:
    def complete(self, messages, tools):
        return AssistantReply(text="好的，马上为您查询。", tool_calls=[])


def test_salvage_closes_an_error_round_as_interrupted_and_the_next_turn_runs_as_usual(
    kefu, store, settings, shop, transport, platform
):
    """Seed 000: an `error` round is not settled; salvage lists it with the pending ones and
    closes it as interrupted, once; the log stays one the next turn appends to."""
    agent = settings.agent.model_copy(update={"max_steps": 2})
    message = platform.buyer_says("shop", "b1", "b1", "什么时候发货？")
    customer = ingest_page(store, transport.page_of("shop", [message])).customer_ids[0]
    evaluate(store, customer, 1000)
    assert run_turn(store, KeepsLooking(), customer, settings.sessions_dir, settings.zone, agent).outcome == "error"
    [failed] = rounds(settings.sessions_dir, unfinished=True)
    assert (failed.status, failed.settled, failed.successful) == ("error", False, False)

    salvaged = kefu.invoke(cli, ["rounds", "--unfinished", "--salvage", "--json", "--source", "simulation"])
    assert salvaged.exit_code == 0, salvaged.output
    report = json.loads(salvaged.output[salvaged.output.index("[") :])
    assert [(r["turn"], r["outcome"], r["batch_open"]) for r in report] == [(failed.turn, "closed", False)]
    [after] = rounds(settings.sessions_dir)
    assert (after.status, after.reason, after.settled, after.successful) == ("interrupted", "salvaged", True, False)
    assert rounds(settings.sessions_dir, unfinished=True) == []
    assert salvage(store, settings.sessions_dir, [failed], 60)[0].outcome == "already-ended"  # once only

    again = platform.buyer_says("shop", "b1", "b1", "还在吗？")
    ingest_page(store, transport.page_of("shop", [again]))
    evaluate(store, customer, 1000)
    assert run_turn(store, Answers(), customer, settings.sessions_dir, settings.zone, agent).outcome == "complete"
    assert [r.status for r in rounds(settings.sessions_dir)] == ["interrupted", "complete"]
