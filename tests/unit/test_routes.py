"""Routes (SPEC 3.2) and group admission triggers (SPEC 3.6), table-driven."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runtime.admission.batches import evaluate
from runtime.admission.routes import RouteChanges, RouteSpec, create_route, list_routes, update_route
from runtime.errors import KefuError
from runtime.inbound.ingest import ingest_page
from runtime.inbound.pages import parse_page

AT = "2026-11-30T06:05:00+00:00"


def group_page(op: str, conversation: str, messages: list[tuple[str, bool | None]], kind: str = "group"):
    return parse_page(
        {
            "account_id": "shop",
            "stream_id": "s",
            "cursor": op,
            "page_op_id": op,
            "groups": [
                {
                    "conversation_id": conversation,
                    "conversation_type": kind,
                    "messages": [
                        {
                            "platform_message_id": pmid,
                            "sender": {"id": "u1", "display_name": "群友", "role": "buyer"},
                            "content": {"type": "text", "text": "有人吗"},
                            "occurred_at": AT,
                            "mention": mention,
                        }
                        for pmid, mention in messages
                    ],
                }
            ],
        }
    )


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"conversation_type": "direct", "trigger_mention": True}, "direct routes take no group trigger settings"),
        ({"conversation_type": "direct", "trigger_every_n": 3}, "direct routes take no group trigger settings"),
        ({"conversation_type": "group"}, "a group route needs at least one trigger"),
        ({"conversation_type": "group", "trigger_every_n": 0}, "greater than or equal to 1"),
        ({"conversation_type": "group", "trigger_interval_s": -5}, "greater than or equal to 1"),
        ({"conversation_type": "group", "trigger_mention": True, "peer_id": "p"}, "peer_id is for direct routes only"),
        ({"conversation_type": "direct", "target": "specific"}, "a 'specific' route needs conversation_id"),
        ({"conversation_type": "direct", "conversation_id": "c1"}, "an 'all' route must not have one"),
        ({"conversation_type": "direct", "agent_preset": ""}, "at least 1 character"),
    ],
)
def test_invalid_routes_are_refused_naming_the_rule(fields, problem):
    with pytest.raises(ValidationError) as raised:
        RouteSpec(id="r", account_id="shop", **fields)
    assert problem in str(raised.value)


def test_every_n_may_not_exceed_the_batch_size(store, shop):
    spec = RouteSpec(id="g", account_id="shop", conversation_type="group", trigger_every_n=51)
    with pytest.raises(KefuError, match="exceeds the admission batch size 50"):
        create_route(store, spec, op_id="op-g", batch_size=50)


def test_operation_ids_replay_the_stored_result(store, shop):
    spec = RouteSpec(id="g", account_id="shop", conversation_type="group", trigger_mention=True)
    first = create_route(store, spec, op_id="op-1")
    assert create_route(store, spec, op_id="op-1") == first  # a lost response: ask again, same answer
    with store.read() as conn:  # the operation's result is stored with it
        stored = dict(conn.execute("SELECT id, json_extract(result, '$.generation') FROM operation").all())
    assert stored["op-1"] == 1 and "op-never" not in stored
    with pytest.raises(KefuError, match="KEFU_ROUTE_EXISTS"):
        create_route(store, spec, op_id="op-2")
    with pytest.raises(KefuError, match="KEFU_OPERATION_CONFLICT"):
        update_route(store, "g", 1, RouteChanges(enabled=False), op_id="op-1")


def test_updates_check_the_revision_and_bump_the_generation(store, shop):
    create_route(store, RouteSpec(id="g", account_id="shop", conversation_type="group", trigger_mention=True), "op-1")
    changed = update_route(store, "g", 1, RouteChanges(trigger_every_n=5), op_id="op-2")
    assert (changed.revision, changed.generation, changed.trigger_every_n) == (2, 2, 5)
    assert update_route(store, "g", 1, RouteChanges(trigger_every_n=5), op_id="op-2") == changed  # replay
    with pytest.raises(KefuError, match="KEFU_REVISION_CONFLICT"):
        update_route(store, "g", 1, RouteChanges(enabled=False), op_id="op-3")
    with pytest.raises(KefuError, match="a group route needs at least one trigger"):
        update_route(store, "g", 2, RouteChanges(trigger_mention=False, trigger_every_n=None), op_id="op-4")
    with store.read() as conn:
        assert conn.execute("SELECT revision, generation FROM route WHERE id = 'g'").one() == (2, 2)


@pytest.mark.parametrize(
    ("routes", "expected"),
    [
        ([], "no-route"),
        ([("all", None, True)], "admitted"),
        ([("all", None, False)], "route-disabled"),
        ([("all", None, True), ("specific", "c1", False)], "route-disabled"),  # specific beats all, even disabled
        ([("all", None, False), ("specific", "c1", True)], "admitted"),
        ([("specific", "other", True)], "no-route"),
    ],
)
def test_route_precedence(store, shop, routes, expected):
    for index, (target, conversation, enabled) in enumerate(routes):
        spec = RouteSpec(
            id=f"r{index}",
            account_id="shop",
            conversation_type="group",
            target=target,
            conversation_id=conversation,
            enabled=enabled,
            trigger_every_n=1,
        )
        create_route(store, spec, op_id=f"op-{index}")
    customer = ingest_page(store, group_page("p1", "c1", [("m1", None)])).customer_ids[0]
    assert evaluate(store, customer, 1000).reason == expected


@pytest.mark.parametrize(
    ("trigger", "mentions", "expected"),
    [
        ({"trigger_mention": True}, [None, False], "trigger-not-met"),
        ({"trigger_mention": True}, [None, True], "admitted"),
        ({"trigger_every_n": 3}, [None, None], "trigger-not-met"),
        ({"trigger_every_n": 3}, [None, None, None], "admitted"),
        ({"trigger_every_n": 3, "trigger_mention": True}, [True], "admitted"),
        ({"trigger_interval_s": 60}, [None], "trigger-not-met"),
    ],
)
def test_group_triggers(store, shop, trigger, mentions, expected):
    create_route(store, RouteSpec(id="g", account_id="shop", conversation_type="group", **trigger), op_id="op-g")
    page = group_page("p1", "c1", [(f"m{i}", mention) for i, mention in enumerate(mentions)])
    customer = ingest_page(store, page).customer_ids[0]
    assert evaluate(store, customer, 1000).reason == expected


def test_the_interval_trigger_admits_once_the_interval_has_passed(store, shop):
    create_route(store, RouteSpec(id="g", account_id="shop", conversation_type="group", trigger_interval_s=60), "op")
    customer = ingest_page(store, group_page("p1", "c1", [("m1", None)])).customer_ids[0]
    assert evaluate(store, customer, 1000).reason == "trigger-not-met"
    with store.write() as conn:  # a minute passes
        conn.execute("UPDATE inbound_message SET received_at = received_at - 61000")
    assert evaluate(store, customer, 1000).reason == "admitted"


def test_a_profile_gone_from_the_settings_blocks_admission(store, shop, transport, platform):
    spec = RouteSpec(
        id="p",
        account_id="shop",
        conversation_type="direct",
        target="specific",
        conversation_id=platform.conversation_for("b1"),
        agent_preset="cs-hosting",
    )
    create_route(store, spec, op_id="op-p", profiles={"cs-hosting"})  # configured when the route was added
    customer = ingest_page(store, transport.page_of("shop", [platform.buyer_says("shop", "b1", "n", "你好")]))
    assert evaluate(store, customer.customer_ids[0], 1000).reason == "profile-unknown"  # gone since


def test_triggers_accept_the_spec_names():
    spec = RouteSpec.model_validate(
        {
            "id": "g",
            "account_id": "shop",
            "conversation_type": "group",
            "mention": True,
            "every_n": 5,
            "fixed_interval_seconds": 30,
        }
    )
    assert (spec.trigger_mention, spec.trigger_every_n, spec.trigger_interval_s) == (True, 5, 30)
    assert RouteChanges.model_validate({"every_n": 2}).model_dump(exclude_unset=True) == {"trigger_every_n": 2}


def test_a_second_route_for_the_same_conversations_is_refused_naming_the_first(store, shop):
    """Only the oldest would govern them: the second's triggers and profile would never apply."""
    with pytest.raises(KefuError) as twice:
        create_route(store, RouteSpec(id="all-again", account_id="shop", conversation_type="direct"), op_id="o1")
    assert twice.value.code == "KEFU_ROUTE_DUPLICATE" and "'all-direct'" in twice.value.message
    one = RouteSpec(id="c1", account_id="shop", conversation_type="direct", target="specific", conversation_id="c1")
    create_route(store, one, op_id="o2")
    with pytest.raises(KefuError, match="KEFU_ROUTE_DUPLICATE"):
        create_route(store, one.model_copy(update={"id": "c1-again", "enabled": False}), op_id="o3")
    create_route(store, one.model_copy(update={"id": "c2", "conversation_id": "c2"}), op_id="o4")  # another one
    group = RouteSpec(id="g", account_id="shop", conversation_type="group", trigger_mention=True)
    create_route(store, group, op_id="o5")  # the account's group conversations: not the direct ones
    assert sorted(r.id for r in list_routes(store, "shop")) == ["all-direct", "c1", "c2", "g"]
