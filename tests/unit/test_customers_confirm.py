"""Operator views and actions: literal customer search, and confirming a result-unknown send."""

from __future__ import annotations

import pytest

from runtime.accounts.registry import AccountSpec, create_account
from runtime.customers.summaries import list_customers
from runtime.errors import KefuError
from runtime.inbound.ingest import ingest_page
from runtime.inbound.pages import parse_page
from runtime.outbox.requests import begin_attempt, confirm_result, record_failure, register_outbound
from runtime.ports import SendFailure
from runtime.store.tables import OutboundIntent


def page(account: str, op: str, conversation: str, name: str) -> dict:
    message = {
        "platform_message_id": op,
        "sender": {"id": "u", "display_name": name, "role": "buyer"},
        "content": {"type": "text", "text": "你好"},
        "occurred_at": "2026-11-30T06:05:00+00:00",
    }
    group = {"conversation_id": conversation, "conversation_type": "direct", "messages": [message]}
    return {"account_id": account, "stream_id": "s", "cursor": op, "page_op_id": op, "groups": [group]}


def test_search_is_literal_and_real_and_simulated_rows_never_mix(store, shop):
    create_account(store, AccountSpec(id="real", platform="wangwang", identity="seller"))
    for index, name in enumerate(["50%_off小店", "500 off", "5x0aoff"]):
        ingest_page(store, parse_page(page("real", f"r{index}", f"c{index}", name)))
    ingest_page(store, parse_page(page("shop", "s1", "sim-c", "50%_off小店")))
    found = list_customers(store, source="real", search="50%_off")
    assert [c.conversation_id for c in found] == ["c0"]  # % and _ are not wildcards
    assert [c.conversation_id for c in list_customers(store, source="simulation", search="50%_off")] == ["sim-c"]
    assert len(list_customers(store, source="real")) == 3
    assert list_customers(store, source="real", account_id="shop") == []


@pytest.fixture
def unknown_request(store, shop) -> str:
    ingest_page(store, parse_page(page("shop", "m1", "c", "张三")))
    with store.write() as conn:
        register_outbound(
            conn,
            OutboundIntent(
                request_id="r1",
                customer_id=1,
                account_id="shop",
                conversation_id="c",
                recipient_id="u",
                origin="manual",
                body="您好",
            ),
        )
    grant = begin_attempt(store, "r1", "w", 60)
    record_failure(store, "r1", grant.attempt_no, SendFailure("unknown", "TIMEOUT"))
    return "r1"


def test_an_operator_confirms_delivery_or_failure_of_an_unknown_send(store, unknown_request):
    with pytest.raises(KefuError, match="KEFU_REQUEST_UNKNOWN"):
        confirm_result(store, "nope", delivered=True)
    confirmed = confirm_result(store, unknown_request, delivered=True, platform_message_id="p-9")
    assert (confirmed.state, confirmed.platform_message_id) == ("sent", "p-9")
    with pytest.raises(KefuError, match="KEFU_REQUEST_NOT_UNKNOWN"):
        confirm_result(store, unknown_request, delivered=False)


def test_an_operator_confirms_non_delivery(store, unknown_request):
    failed = confirm_result(store, unknown_request, delivered=False)
    assert (failed.state, failed.error_code) == ("failed", "KEFU_OPERATOR_NOT_DELIVERED")


def test_a_reader_watermark_only_moves_forward_and_unread_counts_follow_it(store, shop):
    from runtime.customers.summaries import ack_customer_read

    for n in range(3):
        ingest_page(store, parse_page(page("shop", f"w{n}", "c-read", "王五")))
    [customer] = list_customers(store, source="simulation")
    assert customer.unread == 3
    assert ack_customer_read(store, customer.id, "console-a", 2) == 2
    assert ack_customer_read(store, customer.id, "console-a", 1) == 2  # an older ack never moves it back
    assert list_customers(store, source="simulation", reader="console-a")[0].unread == 1
    assert list_customers(store, source="simulation", reader="console-b")[0].unread == 3
    assert ack_customer_read(store, customer.id, "console-a") == 3
    for bad, code in [((999, "a", None), "KEFU_CUSTOMER_UNKNOWN"), ((customer.id, "a", 4), "KEFU_WATERMARK_INVALID")]:
        with pytest.raises(KefuError) as refused:
            ack_customer_read(store, *bad)
        assert refused.value.code == code


def test_unread_counts_are_reused_until_the_delivery_store_changes(store, shop):
    from runtime.customers.summaries import ack_customer_read, unread_counts

    for n in range(2):
        ingest_page(store, parse_page(page("shop", f"u{n}", f"c-{n}", "赵六")))
    cache = unread_counts(store)
    first = list_customers(store, source="simulation")
    assert sorted(c.unread for c in first) == [1, 1] and cache.computed == 2
    list_customers(store, source="simulation")
    assert cache.computed == 2  # the same change sequence: nothing counted again
    list_customers(store, source="simulation", reader="console-b")
    assert cache.computed == 4  # another reader has counts of its own

    def unread() -> dict[str, int]:
        return {c.conversation_id: c.unread for c in list_customers(store, source="simulation")}

    c0 = next(c.id for c in first if c.conversation_id == "c-0")
    ack_customer_read(store, c0, "operator")  # a moved watermark is a change
    assert unread() == {"c-0": 0, "c-1": 1} and cache.computed == 6
    ingest_page(store, parse_page(page("shop", "u9", "c-0", "赵六")))  # so is a new message
    assert unread() == {"c-0": 1, "c-1": 1} and cache.computed == 8


def test_a_row_previews_the_newest_line_as_the_agent_reads_it_and_names_the_latest_session(store, shop):
    """SPEC 3.4: `[image]`, `[unsupported message type: <type>]`; a file by its name."""
    contents = {
        "c-sticker": {"type": "unsupported", "platform_type": "sticker"},
        "c-image": {"type": "image", "ref": "img-1"},
        "c-file": {"type": "file", "ref": "file-1", "name": "报价单.pdf"},
        "c-text": {"type": "text", "text": "长" * 100},
    }
    for n, (conversation, content) in enumerate(contents.items()):
        sent = page("shop", f"p{n}", conversation, "张三")
        sent["groups"][0]["messages"][0]["content"] = content
        ingest_page(store, parse_page(sent))
    with store.write() as conn:
        conn.execute("UPDATE customer SET session_id = 'sess-7' WHERE conversation_id = 'c-text'")
    rows = {row.conversation_id: row for row in list_customers(store, source="simulation")}
    assert {c: row.preview for c, row in rows.items()} == {
        "c-sticker": "[unsupported message type: sticker]",
        "c-image": "[image]",
        "c-file": "[file 报价单.pdf]",
        "c-text": "长" * 80,
    }
    assert rows["c-text"].session_id == "sess-7" and rows["c-image"].session_id is None
