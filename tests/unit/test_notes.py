"""Operators' private notes on a conversation (runtime.customers.notes, `kefu note`, `kefu
notes`): kept oldest first with their author and audited, never in what the buyer receives, the
transcript or the agent's session; erased with their customer and moved with its account (the
note's id renumbered on the new shard, its order kept)."""

from __future__ import annotations

import json
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import zstandard

from config import load_settings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.batches import evaluate
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.turn import run_turn
from runtime.customers import notes as notes_module
from runtime.customers.erasure import erase_customer
from runtime.customers.notes import add_note, list_notes
from runtime.customers.transcript import transcript
from runtime.errors import KefuError
from runtime.inbound.ingest import ingest_page
from runtime.placement.shards import customer_id_base
from runtime.placement.slices import decode_slice, encode_slice, export_slice, import_slice, remove_slice
from runtime.store import DeliveryStore
from worker.cli import cli

NOTE = "已退款，等买家寄回 单号SF1234"  # what no buyer and no agent may ever see


def say(store, platform, transport, buyer: str, text: str) -> int:
    said = platform.buyer_says("shop", buyer, f"顾客{buyer}", text)
    return ingest_page(store, transport.page_of("shop", [said])).customer_ids[0]


def answer(store, settings, customer: int) -> None:
    """The rules agent's turn on the customer's waiting lines, as a worker runs it."""
    evaluate(store, customer, 1000)
    run_turn(
        store, RulesProvider(load_knowledge(None)), customer, settings.sessions_dir, ZoneInfo("Asia/Shanghai"),
        settings.agent,
    )  # fmt: skip


def files_holding(folder: Path, text: str, but: set[Path]) -> list[str]:
    """Every file under the folder (zstd frames opened) holding the text, `but` those."""
    found = []
    for path in folder.rglob("*"):
        if not path.is_file() or any(path.name.startswith(p.name) for p in but):
            continue
        data = path.read_bytes()
        if path.suffix == ".zst":
            data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
        if text.encode() in data:
            found.append(path.name)
    return found


def note_rows(store: DeliveryStore) -> list[tuple]:
    with store.read() as conn:
        return [tuple(r) for r in conn.execute("SELECT id, customer_id, account_id, operator, body FROM operator_note")]


def test_notes_are_kept_oldest_first_with_their_author_and_audited_without_their_words(
    store, shop, platform, transport
):
    customer = say(store, platform, transport, "b1", "在吗")
    first = add_note(store, "alice", customer, f"  {NOTE}\n")
    second = add_note(store, "bob", customer, "好的，我跟进")
    assert [(n.operator, n.body) for n in list_notes(store, customer)] == [("alice", NOTE), ("bob", "好的，我跟进")]
    assert first.account_id == "shop" and (first.id or 0) < (second.id or 0)
    with store.read() as conn:
        actions = [tuple(r) for r in conn.execute("SELECT operator, action, customer_id, detail FROM operator_action")]
    assert actions == [("alice", "note", customer, f"note {first.id}"), ("bob", "note", customer, f"note {second.id}")]


def test_a_bad_note_or_an_unknown_customer_is_refused_and_nothing_is_written(store, shop, platform, transport):
    customer = say(store, platform, transport, "b1", "在吗")
    for body, code in [("", "KEFU_NOTE_INVALID"), (" \n ", "KEFU_NOTE_INVALID"), ("长" * 4001, "KEFU_NOTE_INVALID")]:
        with pytest.raises(KefuError) as refused:
            add_note(store, "alice", customer, body)
        assert refused.value.code == code
    for call in (lambda: add_note(store, "alice", 999_999, NOTE), lambda: list_notes(store, 999_999)):
        with pytest.raises(KefuError) as unknown:
            call()
        assert unknown.value.code == "KEFU_CUSTOMER_UNKNOWN"
    assert note_rows(store) == [] and list_notes(store, customer) == []
    assert add_note(store, "alice", customer, "长" * 4000).body == "长" * 4000


def test_a_note_and_its_audit_row_commit_together(store, shop, platform, transport, monkeypatch):
    customer = say(store, platform, transport, "b1", "在吗")

    def audit_fails(*args, **kwargs):
        raise RuntimeError("the audit insert failed")

    monkeypatch.setattr(notes_module, "record", audit_fails)
    with pytest.raises(RuntimeError):
        add_note(store, "alice", customer, NOTE)
    assert note_rows(store) == []


def test_a_note_reaches_neither_the_buyer_the_transcript_nor_the_agent(settings, store, shop, platform, transport):
    customer = say(store, platform, transport, "b1", "什么时候发货？")
    add_note(store, "alice", customer, NOTE)
    say(store, platform, transport, "b1", "发什么快递？")
    answer(store, settings, customer)
    assert any(line.speaker == "assistant" for line in transcript(store, customer).lines)  # the agent did answer
    shown = transcript(store, customer, sessions_dir=settings.sessions_dir).lines
    assert all(NOTE not in line.text for line in shown)
    with store.read() as conn:
        replies = list(
            conn.execute("SELECT body FROM outbox_request WHERE customer_id = :c", {"c": customer}).scalars()
        )
    assert replies and all(NOTE not in body for body in replies)  # what goes to the buyer
    # Only the delivery store holds it: no session log (the agent's history and context) does.
    assert list(settings.sessions_dir.rglob("*.jsonl.zst"))  # the turn's session log is there to search
    holding = files_holding(settings.data_dir, NOTE, {settings.simulator_path})
    assert holding and all(name.startswith(settings.delivery_path.name) for name in holding)


def test_a_note_is_erased_with_its_customer_and_the_other_customers_stay(settings, store, shop, platform, transport):
    erased = say(store, platform, transport, "b1", "在吗")
    kept = say(store, platform, transport, "b2", "在吗")
    add_note(store, "alice", erased, NOTE)
    add_note(store, "alice", kept, "另一位顾客的备注")
    erase_customer(store, None, settings.sessions_dir, None, erased, "tester")
    assert [body for *_, body in note_rows(store)] == ["另一位顾客的备注"]
    assert files_holding(settings.data_dir, NOTE, {settings.simulator_path}) == []  # overwritten, not just unlinked
    with store.read() as conn:
        details = conn.execute("SELECT detail FROM operator_action WHERE customer_id = :c", {"c": erased}).scalars()
        assert list(details) == [None]  # who noted stays, what about goes


def test_notes_move_with_their_account_renumbered_in_order_and_leave_the_source(
    store, shop, platform, transport, tmp_path
):
    customer = say(store, platform, transport, "b1", "在吗")
    add_note(store, "alice", customer, "第一条")
    add_note(store, "bob", customer, "第二条")
    there = load_settings(data_dir=tmp_path / "b", shard="shard-b")
    target = DeliveryStore(there.delivery_path, there.delivery, customer_id_base=customer_id_base("shard-b"))
    try:
        create_account(target, AccountSpec(id="other", platform="simulator", identity="seller-2"))
        other = ingest_page(target, transport.page_of("other", [platform.buyer_says("other", "x", "x", "你好")]))
        [other_customer] = other.customer_ids
        for n in range(3):  # ids 1..3 are taken here: the moved notes cannot keep theirs
            add_note(target, "carol", other_customer, f"本店备注{n}")
        moved = decode_slice(encode_slice(export_slice(store, None, tmp_path / "s", None, "shop", "shard-a", 3)))
        assert [r["body"] for r in moved.tables["operator_note"]] == ["第一条", "第二条"]
        import_slice(target, None, there.sessions_dir, None, moved, "move-1", "shard-b", None)
        here = [(n.id, n.operator, n.body) for n in list_notes(target, customer)]
        assert [(o, b) for _, o, b in here] == [("alice", "第一条"), ("bob", "第二条")]
        assert [i for i, _, _ in here] == [4, 5]
        assert [n.body for n in list_notes(target, other_customer)] == ["本店备注0", "本店备注1", "本店备注2"]
        remove_slice(store, None, tmp_path / "s", None, "shop", "shard-b", 3)
        assert note_rows(store) == []
    finally:
        target.close()


def test_the_cli_adds_and_lists_notes_and_refuses_an_unknown_customer(kefu, store, shop, platform, transport):
    customer = say(store, platform, transport, "b1", "在吗")
    added = kefu.invoke(cli, ["note", str(customer), NOTE])
    assert added.exit_code == 0 and f"on customer {customer}" in added.output
    listed = kefu.invoke(cli, ["notes", str(customer), "--json"])
    [row] = json.loads(listed.output)
    assert row["body"] == NOTE and row["operator"].startswith("cli:")
    table = kefu.invoke(cli, ["notes", str(customer)])
    assert table.exit_code == 0 and "SF1234" in table.output
    for args in (["note", "999999", "x"], ["notes", "999999"]):
        unknown = kefu.invoke(cli, args)
        assert unknown.exit_code == 2 and "KEFU_CUSTOMER_UNKNOWN" in unknown.output
    empty = kefu.invoke(cli, ["note", str(customer), "  "])
    assert empty.exit_code == 2 and "KEFU_NOTE_INVALID" in empty.output
