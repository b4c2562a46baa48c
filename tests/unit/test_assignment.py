"""A conversation's assignee and status in the team's inbox (runtime.customers.assignment)."""

from __future__ import annotations

import getpass
import json

import pytest

from runtime.admission.handling import handling_state, pause_handling
from runtime.customers.assignment import assign, assignment, hand_back, reopen, resolve, snooze, take_over
from runtime.customers.summaries import list_customers
from runtime.errors import KefuError
from runtime.inbound.ingest import ingest_page
from runtime.operators.accounts import Role, add_operator, disable_operator
from runtime.operators.status import notices, operations
from runtime.store import now_ms
from runtime.store.states import ConversationStatus
from worker.cli import cli

OPEN, WAITING, RESOLVED, SNOOZED = (
    ConversationStatus.OPEN,
    ConversationStatus.WAITING,
    ConversationStatus.RESOLVED,
    ConversationStatus.SNOOZED,
)


@pytest.fixture
def team(store):
    for name, role in (("alice", Role.OPERATOR), ("bob", Role.OPERATOR), ("victor", Role.VIEWER)):
        add_operator(store, name, role, "a-long-password")
    return store


def say(store, transport, platform, text, buyer="b1", name="张三"):
    return ingest_page(store, transport.page_of("shop", [platform.buyer_says("shop", buyer, name, text)])).customer_ids[
        0
    ]


def listed(store, reader="alice", **filters):
    return [row.id for row in list_customers(store, "simulation", reader=reader, **filters)]


def actions(store, customer):
    with store.read() as conn:
        found = conn.execute(
            "SELECT operator, action, detail FROM operator_action WHERE customer_id = ? ORDER BY id", (customer,)
        )
        return [tuple(row) for row in found]


def test_a_handoff_waits_unassigned_until_an_operator_takes_it(team, shop, transport, platform):
    customer = say(team, transport, platform, "我要退款")
    pause_handling(team, customer, "handoff: 退款需要人工确认", handoff=True)
    waiting = assignment(team, customer)
    assert (waiting.status, waiting.assignee, waiting.handling_paused) == (WAITING, None, True)
    assert notices(team).handoffs_waiting == 1 and operations(team).handoffs_waiting == 1
    assert listed(team, view="unassigned", status=WAITING) == [customer]

    taken = take_over(team, customer, "alice")
    assert (taken.status, taken.assignee, taken.handling_paused) == (OPEN, "alice", True)
    assert taken.handling_reason == "handoff: 退款需要人工确认"  # what the buyer needs stays
    assert notices(team).handoffs_waiting == 0 and operations(team).handoffs_waiting == 0  # a human has it
    assert listed(team, view="mine") == [customer] and listed(team, reader="bob", view="mine") == []
    assert listed(team, status=WAITING) == []


def test_a_second_operator_cannot_silently_take_anothers_conversation(team, shop, transport, platform):
    customer = say(team, transport, platform, "在吗")
    take_over(team, customer, "alice", "VIP")
    epoch = handling_state(team, customer).epoch
    with pytest.raises(KefuError, match="KEFU_CONVERSATION_TAKEN") as refused:
        take_over(team, customer, "bob", "mine now")
    assert "alice" in refused.value.message
    assert take_over(team, customer, "alice").handling_reason == "VIP"  # again: nothing changes
    assert handling_state(team, customer).epoch == epoch

    moved = assign(team, customer, "bob", by="alice")  # a re-assignment moves it, pause and all
    assert (moved.assignee, moved.handling_paused) == ("bob", True)
    assert take_over(team, customer, "bob").assignee == "bob"
    assert [a[:2] for a in actions(team, customer)] == [("alice", "take-over"), ("alice", "assign")]


def test_assignment_needs_an_enabled_operator_who_may_answer(team, shop, transport, platform):
    customer = say(team, transport, platform, "在吗")
    with pytest.raises(KefuError, match="KEFU_ROLE_REQUIRED"):
        assign(team, customer, "victor", by="alice")
    disable_operator(team, "bob")
    with pytest.raises(KefuError, match="KEFU_OPERATOR_UNKNOWN"):
        assign(team, customer, "bob", by="alice")
    with pytest.raises(KefuError, match="KEFU_CUSTOMER_UNKNOWN"):
        assign(team, 424242, "alice", by="alice")
    assert assignment(team, customer).assignee is None and actions(team, customer) == []  # nothing half-written
    assert assign(team, customer, "alice", by="alice").handling_paused is False  # the agent still answers
    assert assign(team, customer, None, by="alice").assignee is None


def test_resolving_hands_back_and_the_buyers_next_message_reopens(team, shop, transport, platform):
    customer = say(team, transport, platform, "我要退款")
    take_over(team, customer, "alice")
    resolved = resolve(team, customer, by="alice")
    assert (resolved.status, resolved.handling_paused, resolved.assignee) == (RESOLVED, False, "alice")
    assert listed(team, status=RESOLVED) == [customer] and listed(team, status=OPEN) == []
    assert say(team, transport, platform, "又有问题了") == customer
    assert assignment(team, customer).status == OPEN
    assert listed(team, status=OPEN) == [customer] and listed(team, status=RESOLVED) == []
    assert [a[1] for a in actions(team, customer)] == ["take-over", "resolve"]


def test_a_snooze_ends_at_its_time_or_at_the_buyers_message(team, shop, transport, platform):
    first = say(team, transport, platform, "明天再说", buyer="b1")
    second = say(team, transport, platform, "好的", buyer="b2", name="李四")
    with pytest.raises(KefuError, match="KEFU_INVALID_INPUT"):
        snooze(team, first, now_ms() - 1, by="alice")
    snooze(team, first, now_ms() + 3_600_000, by="alice")
    assert assignment(team, first).status == SNOOZED
    assert listed(team, status=SNOOZED) == [first]
    say(team, transport, platform, "我想好了", buyer="b1")
    assert assignment(team, first).status == OPEN

    with team.write() as conn:  # a snooze whose time has come
        conn.execute("UPDATE customer SET status = 'snoozed', snoozed_until = ? WHERE id = ?", (now_ms() - 1, second))
    assert assignment(team, second).status == OPEN
    assert listed(team, status=SNOOZED) == []


def test_hand_back_and_reopen(team, shop, transport, platform):
    customer = say(team, transport, platform, "在吗")
    pause_handling(team, customer, "handoff: 投诉", handoff=True)
    assert reopen(team, customer, by="alice").status == WAITING  # still nobody's: still waiting
    back = hand_back(team, customer, "alice")
    assert (back.status, back.handling_paused) == (OPEN, False)
    resolve(team, customer, by="alice")
    assert reopen(team, customer, by="alice").status == OPEN


def test_the_cli_takes_over_assigns_resolves_and_snoozes_and_refuses_with_a_code(kefu, team, shop, transport, platform):
    customer = say(team, transport, platform, "在吗")
    taken = kefu.invoke(cli, ["take-over", str(customer), "alice", "--reason", "VIP"])
    assert taken.exit_code == 0 and "assigned to alice" in taken.output
    refused = kefu.invoke(cli, ["take-over", str(customer), "bob"])
    assert refused.exit_code == 2 and "KEFU_CONVERSATION_TAKEN" in refused.output
    assert kefu.invoke(cli, ["assign", str(customer), "bob", "--by", "alice"]).exit_code == 0
    assert assignment(team, customer).assignee == "bob"
    neither = kefu.invoke(cli, ["assign", str(customer)])
    assert neither.exit_code == 2 and "KEFU_INVALID_INPUT" in neither.output
    unknown = kefu.invoke(cli, ["assign", str(customer), "nobody-here"])
    assert unknown.exit_code == 2 and "KEFU_OPERATOR_UNKNOWN" in unknown.output
    resolved = kefu.invoke(cli, ["resolve", str(customer), "--by", "bob"])
    assert resolved.exit_code == 0 and "resolved" in resolved.output and "the agent answers" in resolved.output
    snoozed = kefu.invoke(cli, ["snooze", str(customer), "--hours", "2"])
    assert snoozed.exit_code == 0 and "snoozed until" in snoozed.output
    assert kefu.invoke(cli, ["reopen", str(customer)]).exit_code == 0
    assert assignment(team, customer).status == OPEN
    assert [a[:2] for a in actions(team, customer)][-4:] == [
        ("alice", "assign"),
        ("bob", "resolve"),
        (f"cli:{getpass.getuser()}", "snooze"),
        (f"cli:{getpass.getuser()}", "reopen"),
    ]


def test_kefu_customers_filters_by_view_and_status(kefu, team, shop, transport, platform):
    first = say(team, transport, platform, "在吗", buyer="b1")
    say(team, transport, platform, "在吗", buyer="b2", name="李四")
    take_over(team, first, "alice")
    mine = kefu.invoke(cli, ["customers", "--source", "simulation", "--view", "mine", "--reader", "alice", "--json"])
    assert mine.exit_code == 0
    assert [(row["id"], row["assignee"], row["status"]) for row in json.loads(mine.output)] == [
        (first, "alice", "open")
    ]
    waiting = kefu.invoke(cli, ["customers", "--source", "simulation", "--status", "waiting", "--json"])
    assert waiting.exit_code == 0 and json.loads(waiting.output) == []
    bad = kefu.invoke(cli, ["customers", "--status", "closed"])
    assert bad.exit_code == 2 and "KEFU_INVALID_INPUT" in bad.output
    bad = kefu.invoke(cli, ["customers", "--view", "theirs"])
    assert bad.exit_code == 2 and "KEFU_INVALID_INPUT" in bad.output
