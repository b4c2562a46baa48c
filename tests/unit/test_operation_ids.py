"""Operation ids (SPEC 3.1): `kefu accounts pause|resume --op-id` store their result, so the
same id again returns it and changes nothing; `kefu operations show OP_ID` reads what an id
holds (an account or route receipt, a move's journal) without running or replaying anything."""

from __future__ import annotations

import json

import pytest

from runtime.accounts.registry import AccountSpec, create_account, delete_account, load_account
from runtime.admission.routes import RouteChanges, RouteSpec, create_route, delete_route, list_routes, update_route
from runtime.errors import KefuError
from runtime.placement.directory import enter_accounts
from runtime.placement.moves import begin_move
from worker.cli import cli
from worker.coordination import LocalCoordinator


def _revision(store, account: str) -> tuple[int, str]:
    with store.read() as conn:
        found = load_account(conn, account)
    return found.revision, found.connection_intent


def _receipts(store) -> int:
    with store.read() as conn:
        return conn.execute("SELECT count(*) FROM operation").scalar_one()


def test_pause_and_resume_under_an_op_id_replay_their_stored_result(kefu, store, shop):
    paused = kefu.invoke(cli, ["accounts", "pause", "shop", "--op-id", "pause-1"])
    assert paused.exit_code == 0, paused.output
    assert "account shop: disconnected (revision 2); operation pause-1" in paused.output
    resumed = kefu.invoke(cli, ["accounts", "resume", "shop", "--op-id", "resume-1"])
    assert "account shop: connected (revision 3)" in resumed.output
    replayed = kefu.invoke(cli, ["accounts", "pause", "shop", "--op-id", "pause-1"])  # a lost response, asked again
    assert replayed.exit_code == 0 and "account shop: disconnected (revision 2); operation pause-1" in replayed.output
    assert _revision(store, "shop") == (3, "connected")  # the replay paused nothing

    create_account(store, AccountSpec(id="other", platform="simulator", identity="seller-2"))
    for args in (["resume", "shop"], ["pause", "other"]):  # another operation, or another account, under that id
        refused = kefu.invoke(cli, ["accounts", *args, "--op-id", "pause-1"])
        assert refused.exit_code == 2 and "KEFU_OPERATION_CONFLICT" in refused.output, refused.output
    assert _revision(store, "shop") == (3, "connected") and _revision(store, "other") == (1, "connected")
    plain = kefu.invoke(cli, ["accounts", "pause", "shop"])  # without one: a fresh id, named for the record
    assert "account shop: disconnected (revision 4); operation account-pause-" in plain.output


def test_operations_show_reads_a_receipt_or_a_move_and_never_runs_anything(kefu, store, shop, settings):
    kefu.invoke(cli, ["accounts", "pause", "shop", "--op-id", "pause-1"])
    before = _receipts(store)
    shown = kefu.invoke(cli, ["operations", "show", "pause-1", "--json"])
    assert shown.exit_code == 0, shown.output
    pause = json.loads(shown.output)
    assert (pause["kind"], pause["state"]) == ("account.pause", "done")
    assert pause["result"] == {"account_id": "shop", "connection_intent": "disconnected", "revision": 2}
    route = json.loads(kefu.invoke(cli, ["operations", "show", "op-all", "--json"]).output)  # the shop's route
    assert (route["kind"], route["result"]["id"]) == ("route.create", "all-direct")
    table = kefu.invoke(cli, ["operations", "show", "pause-1"])
    assert table.exit_code == 0 and "account.pause" in table.output and "done" in table.output

    coordination = LocalCoordinator(settings.data_dir / "coordination.sqlite")  # the embedded broker's
    enter_accounts(store, coordination, settings.shard)
    begin_move(coordination, "move-1", "shop", "b")
    move = json.loads(kefu.invoke(cli, ["operations", "show", "move-1", "--json"]).output)
    assert (move["kind"], move["state"]) == ("account.move", "stopping")
    assert (move["result"]["source"], move["result"]["target"], move["result"]["error"]) == ("default", "b", None)

    unknown = kefu.invoke(cli, ["operations", "show", "pause-2"])
    assert unknown.exit_code == 2 and "KEFU_OPERATION_UNKNOWN" in unknown.output and "Traceback" not in unknown.output
    assert _receipts(store) == before and _revision(store, "shop") == (2, "disconnected")  # nothing ran


def test_an_operation_id_replayed_on_another_account_or_route_is_refused_and_changes_nothing(store, shop):
    """A receipt names what its operation was on: the same id on anything else is a conflict,
    never a silent "done" with the other one's result."""
    create_account(store, AccountSpec(id="a1", platform="simulator", identity="seller-a1"))
    create_account(store, AccountSpec(id="a2", platform="simulator", identity="seller-a2"))
    assert delete_account(store, "a2", 1, "op-x") == 2
    assert delete_account(store, "a2", 1, "op-x") == 2  # a lost response, asked again
    with pytest.raises(KefuError, match="KEFU_OPERATION_CONFLICT.*account.delete on 'a2'"):
        delete_account(store, "a1", 1, "op-x")
    assert _revision(store, "a1") == (1, "connected")  # a1 is untouched
    for route in ("r1", "r2"):  # one group conversation each
        group = {"conversation_type": "group", "target": "specific", "conversation_id": route, "trigger_mention": True}
        create_route(store, RouteSpec(id=route, account_id="shop", **group), route)
    delete_route(store, "r2", 1, "op-y")
    with pytest.raises(KefuError, match="KEFU_OPERATION_CONFLICT"):
        delete_route(store, "r1", 1, "op-y")
    with pytest.raises(KefuError, match="KEFU_OPERATION_CONFLICT"):
        update_route(store, "r1", 1, RouteChanges(enabled=False), op_id="r2")  # r2's create receipt
    assert [r.id for r in list_routes(store, "shop") if r.id in ("r1", "r2")] == ["r1"]
    assert next(r for r in list_routes(store, "shop") if r.id == "r1").enabled
