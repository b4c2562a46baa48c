"""Observation (SPEC 3.1's observation lease, issue 42 item 2): a route that observes keeps its
account's listener running and its conversations stored, never answered; switched back to
answer, only input that comes after is answered, never the observed backlog."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from runtime.accounts.registry import AccountSpec, create_account, listening_accounts
from runtime.admission.batches import evaluate
from runtime.admission.routes import RouteChanges, RouteSpec, create_route, delete_route, update_route
from runtime.inbound.ingest import ingest_page
from runtime.inbound.pages import parse_page
from runtime.memory.engine import MemoryEngine
from runtime.memory.history import day_start, observed_customers, remember_observed
from runtime.memory.store import MemoryStore
from runtime.store import now_ms

AT = "2026-11-30T06:05:00+00:00"


@pytest.fixture
def observed(store) -> str:
    """Account `shop` whose only route observes its direct conversations."""
    create_account(store, AccountSpec(id="shop", platform="simulator", identity="seller-1"))
    create_route(store, RouteSpec(id="direct", account_id="shop", conversation_type="direct", mode="observe"), "op-1")
    return "shop"


def page(op: str, *messages: str, conversation: str = "c1") -> object:
    return parse_page(
        {
            "account_id": "shop",
            "stream_id": "s",
            "cursor": op,
            "page_op_id": op,
            "groups": [
                {
                    "conversation_id": conversation,
                    "conversation_type": "direct",
                    "messages": [
                        {
                            "platform_message_id": m,
                            "sender": {"id": "b1", "display_name": "张三", "role": "buyer"},
                            "content": {"type": "text", "text": f"问题 {m}"},
                            "occurred_at": AT,
                        }
                        for m in messages
                    ],
                }
            ],
        }
    )


def states(store) -> dict[str, str]:
    with store.read() as conn:
        return dict(conn.execute("SELECT platform_message_id, state FROM inbound_message ORDER BY id").all())


def batches(store) -> list[tuple[str, int]]:
    with store.read() as conn:
        return conn.execute("SELECT route_id, message_count FROM admission_batch ORDER BY created_at").all()


def test_an_account_whose_only_route_observes_still_listens(store, observed):
    with store.read() as conn:
        assert [a.id for a in listening_accounts(conn)] == ["shop"]
    update_route(store, "direct", 1, RouteChanges(enabled=False), "op-2")
    with store.read() as conn:
        assert listening_accounts(conn) == []  # a disabled route is no lease


def test_observed_input_is_stored_and_never_admitted(store, observed):
    result = ingest_page(store, page("p1", "m1", "m2"), admit_batch_size=1000)
    assert result.turns_due == []
    assert states(store) == {"m1": "observed", "m2": "observed"}
    customer = result.customer_ids[0]
    assert evaluate(store, customer, 1000).reason == "nothing-pending"
    assert batches(store) == []


def test_switched_to_answer_only_new_input_is_admitted(store, observed):
    customer = ingest_page(store, page("p1", "m1"), admit_batch_size=1000).customer_ids[0]
    answering = update_route(store, "direct", 1, RouteChanges(mode="answer"), "op-answer")
    assert (answering.mode, answering.generation) == ("answer", 2)
    assert evaluate(store, customer, 1000).reason == "nothing-pending"
    result = ingest_page(store, page("p2", "m2"), admit_batch_size=1000)
    assert result.turns_due == [customer]
    assert states(store) == {"m1": "observed", "m2": "claimed"}
    assert batches(store) == [("direct", 1)]  # the new message alone
    # Back to observing: what comes next is kept again.
    update_route(store, "direct", 2, RouteChanges(mode="observe"), "op-observe")
    ingest_page(store, page("p3", "m3", conversation="c2"), admit_batch_size=1000)
    assert states(store)["m3"] == "observed"


def test_input_waiting_when_the_route_switches_is_observed_input(store, observed):
    """A page stored but not yet decided (its admission still to come) when the route answers:
    it came while the route observed, so it is never answered."""
    customer = ingest_page(store, page("p1", "m1")).customer_ids[0]  # no admission in ingest
    assert states(store) == {"m1": "pending"}
    update_route(store, "direct", 1, RouteChanges(mode="answer"), "op-answer")
    assert states(store) == {"m1": "observed"}
    assert evaluate(store, customer, 1000).reason == "nothing-pending"


@pytest.mark.parametrize("change", ["specific-answer-route", "delete"])
def test_another_route_taking_over_does_not_answer_the_observed_backlog(store, observed, change):
    create_route(store, RouteSpec(id="all", account_id="shop", conversation_type="group", every_n=1), "op-g")
    customer = ingest_page(store, page("p1", "m1")).customer_ids[0]
    if change == "delete":
        delete_route(store, "direct", 1, "op-delete")
        create_route(store, RouteSpec(id="direct-2", account_id="shop", conversation_type="direct"), "op-d2")
    else:
        spec = RouteSpec(
            id="c1", account_id="shop", conversation_type="direct", target="specific", conversation_id="c1"
        )
        create_route(store, spec, "op-c1")
    assert states(store) == {"m1": "observed"}
    assert evaluate(store, customer, 1000).reason == "nothing-pending"


def test_route_mode_operations_replay_by_op_id(store, observed):
    first = update_route(store, "direct", 1, RouteChanges(mode="answer"), "op-x")
    assert update_route(store, "direct", 1, RouteChanges(mode="answer"), "op-x") == first


def test_a_specific_route_that_observes_beats_an_answering_all_route(store, shop):
    spec = RouteSpec(
        id="quiet",
        account_id="shop",
        conversation_type="direct",
        target="specific",
        conversation_id="c1",
        mode="observe",
    )
    create_route(store, spec, "op-q")
    ingest_page(store, page("p1", "m1"), admit_batch_size=1000)
    ingest_page(store, page("p2", "m2", conversation="c2"), admit_batch_size=1000)
    assert states(store) == {"m1": "observed", "m2": "claimed"}


def test_observed_days_that_ended_go_into_memory_once(store, observed, settings):
    memory = settings.memory.model_copy(update={"allow_small_window": True})
    engine = MemoryEngine(MemoryStore(settings.memory_path), memory, 100_000, settings.zone, model_scores=False)
    customer = ingest_page(store, page("p1", "m1", "m2"), admit_batch_size=1000).customer_ids[0]
    ingest_page(store, page("p2", "m3"), admit_batch_size=1000)
    today = day_start(now_ms(), engine)
    yesterday = today - 86_400_000 + 3_600_000
    with store.write() as conn:  # m1 and m2 came yesterday, m3 today
        conn.execute("UPDATE inbound_message SET received_at = ? WHERE platform_message_id != 'm3'", (yesterday,))
    assert observed_customers(store, engine, now_ms()) == [customer]
    assert remember_observed(store, engine, customer, now_ms(), 30) == 1
    (folder,) = engine.store.folders(f"customer-{customer}")
    text = engine.store.text(folder.id)
    assert "问题 m1" in text and "问题 m2" in text and "问题 m3" not in text and folder.scored
    assert remember_observed(store, engine, customer, now_ms(), 30) == 0  # that day is done
    tomorrow = int(
        (datetime.fromtimestamp(today / 1000, settings.zone) + timedelta(days=1, hours=1)).timestamp() * 1000
    )
    assert remember_observed(store, engine, customer, tomorrow, 30) == 1  # today's, once it has ended
    assert len(engine.store.folders(f"customer-{customer}")) == 2


def test_the_routes_commands_add_list_and_switch_the_mode(kefu, store):
    from worker.cli import cli

    create_account(store, AccountSpec(id="shop", platform="simulator", identity="seller-1"))
    added = kefu.invoke(cli, ["routes", "add", "r1", "--account", "shop", "--type", "direct", "--observe"])
    assert added.exit_code == 0, added.output
    listed = kefu.invoke(cli, ["routes", "list", "--json"])
    assert [(r["id"], r["mode"]) for r in json.loads(listed.output)] == [("r1", "observe")]
    assert "mode" in kefu.invoke(cli, ["routes", "list"]).output
    answered = kefu.invoke(cli, ["routes", "answer", "r1", "--op-id", "op-a"])
    assert answered.exit_code == 0 and "r1: answers (revision 2)" in answered.output
    replay = kefu.invoke(cli, ["routes", "answer", "r1", "--op-id", "op-a"])
    assert "revision 2" in replay.output
    observing = kefu.invoke(cli, ["routes", "observe", "r1"])
    assert "r1: observes (stores, never answers) (revision 3)" in observing.output


def test_the_hourly_beat_task_remembers_observed_days_through_the_worker_shell(store, observed, settings):
    from worker.celery_app import make_app

    app = make_app(settings)
    assert app.conf.beat_schedule["memory-observed"]["task"] == "kefu.memory.remember_observed"
    customer = ingest_page(store, page("p1", "m1"), admit_batch_size=1000).customer_ids[0]
    with store.write() as conn:  # it came two days ago
        conn.execute("UPDATE inbound_message SET received_at = ?", (now_ms() - 2 * 86_400_000,))
    assert app.tasks["kefu.memory.remember_observed"].apply().get() == 1
    assert app.tasks["kefu.memory.remember_observed"].apply().get() == 0
    assert len(MemoryStore(settings.memory_path).folders(f"customer-{customer}")) == 1


def test_the_console_conversation_page_says_the_route_observes(settings, store, observed):
    from starlette.testclient import TestClient

    from runtime.operators.accounts import Role, add_operator
    from worker.console import create_app
    from worker.context import WorkerRuntime

    customer = ingest_page(store, page("p1", "m1"), admit_batch_size=1000).customer_ids[0]
    add_operator(store, "victor", Role.VIEWER, "viewer-pass-1")
    with TestClient(create_app(WorkerRuntime(settings))) as client:
        token = client.get("/login").text.split('name="csrf" value="')[1].split('"')[0]
        client.post("/login", data={"csrf": token, "name": "victor", "password": "viewer-pass-1"})
        observing = client.get(f"/c/{customer}").text
        update_route(store, "direct", 1, RouteChanges(mode="answer"), "op-answer")
        answering = client.get(f"/c/{customer}").text
    assert 'id="observing"' in observing and "route direct only listens" in observing and "问题 m1" in observing
    assert 'id="observing"' not in answering


def test_a_routes_command_made_as_of_an_old_revision_is_refused_and_changes_nothing(kefu, store):
    from worker.cli import cli

    create_account(store, AccountSpec(id="shop", platform="simulator", identity="seller-1"))
    assert kefu.invoke(cli, ["routes", "add", "r1", "--account", "shop", "--type", "direct"]).exit_code == 0
    assert kefu.invoke(cli, ["routes", "disable", "r1", "--revision", "1"]).exit_code == 0  # now at revision 2
    for args in (["enable", "r1"], ["observe", "r1"], ["set-profile", "r1", "default"], ["delete", "r1"]):
        stale = kefu.invoke(cli, ["routes", *args, "--revision", "1"])  # another operator's view, before the change
        assert stale.exit_code == 2 and "KEFU_REVISION_CONFLICT" in stale.output, stale.output
    [route] = json.loads(kefu.invoke(cli, ["routes", "list", "--json"]).output)
    assert (route["enabled"], route["mode"], route["revision"]) == (False, "answer", 2)
    assert kefu.invoke(cli, ["routes", "enable", "r1"]).exit_code == 0  # as of the current one
