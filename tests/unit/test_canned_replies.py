"""The shop's canned replies (runtime.operators.canned_replies, `kefu canned`): kept with a
shortcut, refused whole when anything is wrong (a taken shortcut, an unknown variable, a size
out of bounds), found by what the operator types after `/`, rendered for one conversation and
one operator, every change audited in its own transaction."""

from __future__ import annotations

import json

import pytest

from runtime.errors import KefuError
from runtime.inbound.ingest import ingest_page
from runtime.operators import canned_replies
from runtime.operators.canned_replies import (
    add_reply,
    delete_reply,
    edit_reply,
    list_replies,
    render,
    replies_for,
    search_replies,
)
from worker.cli import cli

GREETING = "{买家}您好，我是{客服}，很高兴为您服务"


def audit(store) -> list[tuple]:
    with store.read() as conn:
        return [tuple(r) for r in conn.execute("SELECT operator, action, customer_id, detail FROM operator_action")]


def stored(store) -> list[tuple]:
    with store.read() as conn:
        return [tuple(r) for r in conn.execute("SELECT id, shortcut, body, updated_by FROM canned_reply ORDER BY id")]


def refused(code: str, call, *args) -> KefuError:
    with pytest.raises(KefuError) as error:
        call(*args)
    assert error.value.code == code
    return error.value


def test_a_reply_is_added_edited_renamed_and_deleted_each_change_audited(store):
    added = add_reply(store, "alice", " /问候 ", GREETING)  # the `/` an operator types is not the shortcut's
    assert (added.shortcut, added.body, added.updated_by) == ("问候", GREETING, "alice")
    edited = edit_reply(store, "bob", "/问候", "{buyer}，您好")
    assert edited.id == added.id and (edited.shortcut, edited.body, edited.updated_by) == (
        "问候",
        "{buyer}，您好",
        "bob",
    )
    renamed = edit_reply(store, "bob", added.id or 0, "您好", shortcut="hello")
    assert stored(store) == [(added.id, "hello", "您好", "bob")]
    assert [r.shortcut for r in list_replies(store)] == [renamed.shortcut] == ["hello"]
    delete_reply(store, "alice", "hello")
    assert stored(store) == [] and list_replies(store) == []
    assert audit(store) == [
        ("alice", "canned-add", None, "问候"),
        ("bob", "canned-edit", None, "问候"),
        ("bob", "canned-edit", None, "hello"),
        ("alice", "canned-delete", None, "hello"),
    ]


def test_a_bad_reply_is_refused_naming_the_problem_and_nothing_is_written(store):
    add_reply(store, "alice", "问候", GREETING)
    add_reply(store, "alice", "发货", "48小时内发货")
    before, log = stored(store), audit(store)
    assert "/问候" in str(refused("KEFU_CANNED_REPLY_EXISTS", add_reply, store, "bob", "/问候", "另一个"))
    refused("KEFU_CANNED_REPLY_EXISTS", edit_reply, store, "bob", "发货", "x", "问候")  # renamed onto another
    unknown = refused("KEFU_CANNED_REPLY_INVALID", add_reply, store, "bob", "typo", "{byuer}您好 {客服} {订单号}")
    assert "{byuer}" in unknown.message and "{订单号}" in unknown.message and "{客服}" not in unknown.message
    refused("KEFU_CANNED_REPLY_INVALID", edit_reply, store, "bob", "问候", "{name}您好")
    for shortcut in ["", "/", "两个 词", "tab\there", "x" * 33]:
        refused("KEFU_CANNED_REPLY_INVALID", add_reply, store, "bob", shortcut, "您好")
    for body in ["", "   ", "长" * 4001]:
        refused("KEFU_CANNED_REPLY_INVALID", add_reply, store, "bob", "ok", body)
    refused("KEFU_CANNED_REPLY_UNKNOWN", edit_reply, store, "bob", "nothing", "您好")
    refused("KEFU_CANNED_REPLY_UNKNOWN", delete_reply, store, "bob", 999)
    assert stored(store) == before and audit(store) == log
    assert add_reply(store, "bob", "x" * 32, "长" * 4000).body == "长" * 4000  # the bounds themselves are fine
    assert add_reply(store, "bob", "smile", "谢谢 {^_^}").body == "谢谢 {^_^}"  # braces around no word: plain text


def test_a_reply_and_its_audit_row_commit_together(store, monkeypatch):
    def audit_fails(*args, **kwargs):
        raise RuntimeError("the audit insert failed")

    monkeypatch.setattr(canned_replies, "record", audit_fails)
    with pytest.raises(RuntimeError):
        add_reply(store, "alice", "问候", GREETING)
    assert stored(store) == []


def test_search_puts_shortcut_prefixes_first_then_substrings_of_shortcut_or_body(store):
    for shortcut, body in [
        ("退款", "退款会在3个工作日内原路退回"),
        ("快递", "默认发中通快递"),
        ("发货", "48小时内发货"),
        ("催发货", "已为您催促仓库"),
        ("100%", "正品保证"),
    ]:
        add_reply(store, "alice", shortcut, body)
    assert [r.shortcut for r in search_replies(store, "发货")] == ["发货", "催发货"]
    assert [r.shortcut for r in search_replies(store, "/快")] == ["快递"]
    assert [r.shortcut for r in search_replies(store, "中通")] == ["快递"]  # found by its body
    assert [r.shortcut for r in search_replies(store, "工作日")] == ["退款"]  # found by its body
    assert [r.shortcut for r in search_replies(store, "%")] == ["100%"]  # a LIKE wildcard is a plain character
    assert search_replies(store, "没有这个") == []
    assert len(search_replies(store, "")) == 5
    for n in range(12):
        add_reply(store, "alice", f"q{n:02}", "问题")
    assert len(search_replies(store, "q")) == 10  # the reply box shows ten at most


def test_a_reply_is_rendered_for_the_conversation_and_the_operator(store, shop, platform, transport):
    said = platform.buyer_says("shop", "b1", "张三", "在吗")
    [customer] = ingest_page(store, transport.page_of("shop", [said])).customer_ids
    add_reply(store, "alice", "问候", GREETING)
    add_reply(store, "alice", "hi", "Hi {buyer}, {operator} here")
    [greeting] = replies_for(store, customer, "alice", "/问")
    assert greeting.text == "张三您好，我是alice，很高兴为您服务"
    assert [r.text for r in replies_for(store, customer, "bob", "hi")] == ["Hi 张三, bob here"]
    assert replies_for(store, 999_999, "alice", "问")[0].text.startswith(canned_replies.UNNAMED_BUYER)
    # One pass: a buyer whose name looks like a variable is not filled in again.
    assert render("{buyer}: {operator}", "{operator}", "alice") == "{operator}: alice"


def test_the_cli_adds_lists_edits_and_deletes_and_refuses_with_a_code(kefu, store):
    added = kefu.invoke(cli, ["canned", "add", "问候", GREETING])
    assert added.exit_code == 0 and "/问候 added" in added.output
    listed = kefu.invoke(cli, ["canned", "list", "--json"])
    [row] = json.loads(listed.output)
    assert (row["shortcut"], row["body"], row["updated_by"].startswith("cli:")) == ("问候", GREETING, True)
    assert kefu.invoke(cli, ["canned", "edit", "/问候", "{买家}您好"]).exit_code == 0
    assert stored(store)[0][2] == "{买家}您好"
    table = kefu.invoke(cli, ["canned", "list"])
    assert table.exit_code == 0 and "问候" in table.output
    taken = kefu.invoke(cli, ["canned", "add", "问候", "again"])
    assert taken.exit_code == 2 and "KEFU_CANNED_REPLY_EXISTS" in taken.output
    typo = kefu.invoke(cli, ["canned", "add", "x", "{buyr}"])
    assert typo.exit_code == 2 and "KEFU_CANNED_REPLY_INVALID" in typo.output and "{buyr}" in typo.output
    assert kefu.invoke(cli, ["canned", "delete", "问候"]).exit_code == 0
    gone = kefu.invoke(cli, ["canned", "delete", "问候"])
    assert gone.exit_code == 2 and "KEFU_CANNED_REPLY_UNKNOWN" in gone.output
    assert [a[1] for a in audit(store)] == ["canned-add", "canned-edit", "canned-delete"]
