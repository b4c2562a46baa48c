"""History imports (SPEC 3.3, issue 42 item 2): JSONL and CSV files into each customer's history
and memory, checked whole first, idempotent, resumable, and never admitted."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from runtime.admission.batches import evaluate
from runtime.customers.assignment import assignment, resolve
from runtime.customers.erasure import erase_customer
from runtime.customers.summaries import ack_customer_read, unread_counts
from runtime.errors import KefuError
from runtime.inbound import history_import
from runtime.inbound.history_import import (
    ImportRejected,
    check_against_store,
    file_format,
    parse_file,
    run_import,
)
from runtime.inbound.ingest import ingest_page
from runtime.inbound.pages import parse_page
from runtime.memory.engine import MemoryEngine
from runtime.memory.store import MemoryStore

LEASE_S = 30.0


def line(conversation="c1", text="这个什么时候发货？", at="2025-11-30T14:05:00+08:00", **fields):
    return {
        "conversation_id": conversation,
        "conversation_type": fields.pop("conversation_type", "direct"),
        "sender_id": fields.pop("sender_id", "b1"),
        "sender_name": fields.pop("sender_name", "张三"),
        "role": fields.pop("role", "buyer"),
        "occurred_at": at,
        "text": text,
        **fields,
    }


def jsonl(tmp_path: Path, lines: list[dict | str], name: str = "h.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x, ensure_ascii=False) for x in lines) + "\n")
    return path


def import_file(store, path: Path, engine=None, account="shop", fmt=None):
    data = path.read_bytes()
    parsed = parse_file(path, data, file_format(path, fmt), account)
    check_against_store(store, parsed)
    return run_import(store, parsed, engine, LEASE_S)


def rows(store, sql, *args):
    with store.read() as conn:
        return conn.execute(sql, args).all()


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


@pytest.fixture
def engine(settings) -> MemoryEngine:
    memory = settings.memory.model_copy(update={"allow_small_window": True})
    return MemoryEngine(MemoryStore(settings.memory_path), memory, 100_000, settings.zone, model_scores=False)


CONVERSATION = [
    line(text="这个什么时候发货？", message_id="m1"),
    line(text="明天发货，顺丰快递", at="2025-11-30T14:06:00+08:00", role="shop", sender_id="s1", sender_name="小美"),
    line(
        "g1", "订单 12345 申请退款", "2025-12-01T09:00:00Z", conversation_type="group", title="售后群", sender_id="b2"
    ),
]


def test_a_jsonl_file_enters_the_history_at_its_own_times_and_memory_never_admission(store, shop, engine, tmp_path):
    counts = import_file(store, jsonl(tmp_path, CONVERSATION), engine)
    assert (counts.rows, counts.imported, counts.present, counts.skipped) == (3, 3, 0, 0)
    stored = rows(
        store,
        "SELECT c.conversation_id, c.conversation_type, m.sender_role, m.body, m.origin, m.state, m.received_at,"
        " m.occurred_at FROM inbound_message m JOIN customer c ON c.id = m.customer_id ORDER BY m.id",
    )
    assert [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in stored] == [
        ("c1", "direct", "external", "这个什么时候发货？", "history", "history"),
        ("c1", "direct", "human-native", "明天发货，顺丰快递", "history", "history"),
        ("g1", "group", "external", "订单 12345 申请退款", "history", "history"),
    ]
    assert (
        [r[6] for r in stored]
        == [r[7] for r in stored]
        == [
            ms("2025-11-30T14:05:00+08:00"),
            ms("2025-11-30T14:06:00+08:00"),
            ms("2025-12-01T09:00:00+00:00"),
        ]
    )
    customers = dict(rows(store, "SELECT conversation_id, last_activity_at FROM customer"))
    assert customers == {"c1": ms("2025-11-30T14:06:00+08:00"), "g1": ms("2025-12-01T09:00:00+00:00")}
    assert rows(store, "SELECT title FROM customer WHERE conversation_id = 'g1'") == [("售后群",)]
    # Never admission: the account is live and its route answers, yet nothing is claimed.
    for (customer_id,) in rows(store, "SELECT id FROM customer"):
        assert evaluate(store, customer_id, 1000).reason == "nothing-pending"
    assert rows(store, "SELECT count(*) FROM admission_batch") == [(0,)]
    # Into memory, scored (the rules agent: the heuristic at once), each conversation its own.
    c1 = rows(store, "SELECT id FROM customer WHERE conversation_id = 'c1'")[0][0]
    folders = engine.store.folders(f"customer-{c1}")
    assert counts.remembered == 2 and len(folders) == 1 and folders[0].scored
    text = engine.store.text(folders[0].id)
    assert "[counterpart 张三] 这个什么时候发货？" in text and "[operator from native client] 明天发货" in text
    assert folders[0].event_from == ms("2025-11-30T14:05:00+08:00")


def test_a_csv_file_with_a_byte_order_mark_and_a_line_break_in_a_cell(store, shop, engine, tmp_path):
    path = tmp_path / "h.csv"
    path.write_bytes(
        "\ufeffconversation_id,conversation_type,sender_id,sender_name,role,occurred_at,text,message_id\n"
        'c1,direct,b1,张三,buyer,2025-11-30T14:05:00+08:00,"你好, 在吗",\n'
        'c1,direct,s1,,shop,2025-11-30T14:06:00+08:00,"在的\n请问有什么可以帮您",m2\n'.encode()
    )
    counts = import_file(store, path, engine)
    assert (counts.imported, counts.present, counts.skipped) == (2, 0, 0)
    stored = rows(store, "SELECT platform_message_id, sender_name, body, sender_role FROM inbound_message ORDER BY id")
    assert stored[0][1:] == ("张三", "你好, 在吗", "external") and stored[0][0].startswith("import-")
    assert stored[1] == ("m2", None, "在的\n请问有什么可以帮您", "human-native")


def test_a_csv_header_must_name_the_columns(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("conversation,conversation_type,sender_id,role,occurred_at\nc1,direct,b1,buyer,2025-11-30T14:05Z\n")
    with pytest.raises(ImportRejected) as refused:
        parse_file(path, path.read_bytes(), "csv", "shop")
    assert {(p.line, p.field, p.message) for p in refused.value.problems} == {
        (1, "conversation", "unknown column"),
        (1, "conversation_id", "missing column"),
        (1, "text", "missing column"),
    }


def test_every_bad_line_is_named_with_its_field_and_nothing_is_written(store, shop, tmp_path):
    path = jsonl(
        tmp_path,
        [
            line(message_id="ok-1"),
            line(at="2025-11-30T14:05:00"),  # no zone
            line(role="customer", text=""),
            "not json",
            "[1, 2]",
            line(colour="red"),
            line(conversation_type="group"),  # c1 is direct on line 1
            line(text="另一句", message_id="ok-1"),  # the id of line 1, other content
            line(account_id="other-shop"),
        ],
    )
    with pytest.raises(ImportRejected) as refused:
        parse_file(path, path.read_bytes(), "jsonl", "shop")
    found = [(p.line, p.field) for p in refused.value.problems]
    assert found == [
        (2, "occurred_at"),
        (3, "role"),
        (3, "text"),
        (4, ""),
        (5, ""),
        (6, "colour"),
        (7, "conversation_type"),
        (8, "message_id"),
        (9, "account_id"),
    ]
    assert refused.value.code == "KEFU_IMPORT_INVALID" and "line 7: conversation_type" in refused.value.message
    assert "这个什么时候发货" not in str(refused.value)  # a buyer's words never in an error
    assert rows(store, "SELECT count(*) FROM inbound_message") == [(0,)]
    assert rows(store, "SELECT count(*) FROM history_import") == [(0,)]


def test_the_store_is_checked_before_anything_is_written(store, shop, tmp_path):
    page = {"account_id": "shop", "stream_id": "s", "cursor": "c", "page_op_id": "p1"}
    group = {"conversation_id": "c1", "conversation_type": "group", "messages": []}
    message = {"platform_message_id": "live-1", "sender": {"id": "b1"}, "content": {"type": "text", "text": "hi"}}
    group["messages"] = [{**message, "occurred_at": "2025-12-01T00:00:00Z"}]
    ingest_page(store, parse_page({**page, "groups": [group]}))
    path = jsonl(tmp_path, [line("c2"), line("c1")])  # c1 is stored as a group
    before = rows(store, "SELECT * FROM inbound_message")
    with pytest.raises(ImportRejected, match="line 2: conversation_type: the stored conversation is group"):
        import_file(store, path)
    with pytest.raises(ImportRejected, match="line 1: account_id: no account 'nobody'"):
        import_file(store, jsonl(tmp_path, [line("c2")]), account="nobody")
    assert rows(store, "SELECT * FROM inbound_message") == before


def test_importing_the_same_file_again_adds_nothing(store, shop, engine, tmp_path):
    path = jsonl(tmp_path, [*CONVERSATION, CONVERSATION[0], line(text="好的"), line(text="好的")])
    first = import_file(store, path, engine)
    # A line repeating another's message exactly is skipped; two like messages without ids are two.
    assert (first.rows, first.imported, first.present, first.skipped) == (6, 5, 0, 1)
    stored = rows(store, "SELECT * FROM inbound_message ORDER BY id")
    folders = {scope: len(engine.store.folders(scope)) for scope in engine.store.scopes()}
    again = import_file(store, path, engine)
    assert again.finished_before and (again.imported, again.present, again.skipped) == (0, 5, 1)
    assert rows(store, "SELECT * FROM inbound_message ORDER BY id") == stored
    assert {scope: len(engine.store.folders(scope)) for scope in engine.store.scopes()} == folders
    # The same messages in another file (another order, other lines around them): the same ids.
    other = jsonl(tmp_path, [line(text="好的"), line("c9", "新的一句"), *reversed(CONVERSATION)], "other.jsonl")
    third = import_file(store, other, engine)
    assert (third.imported, third.present) == (1, 4)


def test_messages_stored_live_before_count_as_present_and_are_not_remembered_twice(store, shop, engine, tmp_path):
    message = {"platform_message_id": "m1", "sender": {"id": "b1", "role": "buyer"}}
    message |= {"content": {"type": "text", "text": "live"}, "occurred_at": "2025-11-30T06:05:00Z"}
    group = {"conversation_id": "c1", "conversation_type": "direct", "messages": [message]}
    ingest_page(
        store,
        parse_page({"account_id": "shop", "stream_id": "s", "cursor": "c", "page_op_id": "p1", "groups": [group]}),
    )
    counts = import_file(store, jsonl(tmp_path, [line(message_id="m1", text="live"), line(text="old")]), engine)
    assert (counts.imported, counts.present) == (1, 1)
    assert rows(store, "SELECT state FROM inbound_message ORDER BY id") == [("pending",), ("history",)]
    (folder,) = engine.store.folders(engine.store.scopes()[0])
    assert "old" in engine.store.text(folder.id) and "live" not in engine.store.text(folder.id)


def test_history_imported_into_a_resolved_conversation_neither_reopens_it_nor_counts_as_unread(
    store, shop, engine, tmp_path
):
    """Earlier chats are not a buyer writing now: only live messages reopen and are unread."""
    message = {"platform_message_id": "m1", "sender": {"id": "b1", "role": "buyer"}}
    message |= {"content": {"type": "text", "text": "live"}, "occurred_at": "2025-12-01T06:05:00Z"}
    group = {"conversation_id": "c1", "conversation_type": "direct", "messages": [message]}
    page = {"account_id": "shop", "stream_id": "s", "cursor": "c", "page_op_id": "p1", "groups": [group]}
    [customer] = ingest_page(store, parse_page(page)).customer_ids
    ack_customer_read(store, customer, "alice")
    resolve(store, customer, "alice")
    import_file(store, jsonl(tmp_path, [line(text="old"), line(text="older", at="2025-11-29T10:00:00+08:00")]), engine)
    assert assignment(store, customer).status == "resolved"
    assert unread_counts(store).get("alice", [customer]) == {customer: 0}


def test_an_interrupted_import_goes_on_where_it_stopped(store, shop, engine, tmp_path, monkeypatch):
    monkeypatch.setattr(history_import, "BATCH_ROWS", 2)
    lines = [line(f"c{i % 3}", f"第{i}句", f"2025-11-{i + 1:02d}T10:00:00+08:00") for i in range(7)]
    path = jsonl(tmp_path, lines)
    real_store_batch, calls = history_import._store_batch, []

    def crash_on_the_third_batch(conn, batch, base):
        calls.append(len(batch))
        if len(calls) == 3:
            raise OSError("killed")  # the batch's transaction rolls back
        return real_store_batch(conn, batch, base)

    monkeypatch.setattr(history_import, "_store_batch", crash_on_the_third_batch)
    with pytest.raises(OSError):
        import_file(store, path, engine)
    assert rows(store, "SELECT count(*) FROM inbound_message") == [(4,)]
    assert rows(store, "SELECT batches_done, remembered, finished_at FROM history_import") == [(2, 2, None)]
    remembered = {scope: len(engine.store.folders(scope)) for scope in engine.store.scopes()}

    monkeypatch.setattr(history_import, "BATCH_ROWS", 500)  # a later run keeps the file's batches
    resumed = import_file(store, path, engine)
    assert calls == [2, 2, 2, 2, 1]  # batches 1 and 2 were not stored again
    assert (resumed.resumed_at, resumed.imported, resumed.present, resumed.finished_before) == (4, 7, 0, False)
    texts = rows(store, "SELECT body FROM inbound_message ORDER BY received_at")
    assert [t for (t,) in texts] == [f"第{i}句" for i in range(7)]
    after = {scope: len(engine.store.folders(scope)) for scope in engine.store.scopes()}
    assert all(after[scope] >= n for scope, n in remembered.items())
    assert sum(after.values()) == resumed.remembered + sum(remembered.values())


def test_a_crash_between_the_history_and_memory_remembers_the_batch_on_the_next_run(
    store, shop, engine, tmp_path, monkeypatch
):
    path = jsonl(tmp_path, CONVERSATION)
    real = history_import._remember_batch

    def crash(*args, **kwargs):
        raise OSError("killed")

    monkeypatch.setattr(history_import, "_remember_batch", crash)
    with pytest.raises(OSError):
        import_file(store, path, engine)
    assert rows(store, "SELECT batches_done, remembered FROM history_import") == [(1, 0)]
    assert engine.store.scopes() == []
    monkeypatch.setattr(history_import, "_remember_batch", real)
    counts = import_file(store, path, engine)
    assert (counts.imported, counts.present, counts.remembered) == (3, 0, 2)
    assert rows(store, "SELECT count(*) FROM inbound_message") == [(3,)]
    assert len(engine.store.scopes()) == 2


def test_an_import_busy_with_a_turn_stops_and_goes_on_later(store, shop, engine, tmp_path, monkeypatch):
    from runtime.store import leases

    monkeypatch.setattr(history_import, "BUSY_TRIES", 1)
    path = jsonl(tmp_path, CONVERSATION[:1])
    with leases.held(store, "customer:1", 60) as fence:  # a turn of the first customer runs
        assert fence is not None
        counts = import_file(store, path, engine)
    assert counts.stopped_busy and counts.imported == 1 and engine.store.scopes() == []
    again = import_file(store, path, engine)
    assert not again.stopped_busy and again.remembered == 1 and engine.store.scopes() == ["customer-1"]


def test_an_erased_buyers_earlier_messages_are_not_imported_again(store, shop, engine, settings, tmp_path):
    path = jsonl(tmp_path, CONVERSATION[:2])
    import_file(store, path, engine)
    (customer_id,) = rows(store, "SELECT id FROM customer")[0]
    erase_customer(store, engine.store, settings.sessions_dir, None, customer_id, "tester")
    other = jsonl(tmp_path, [*CONVERSATION[:2], line(text="擦除之后", at="2026-01-01T00:00:00+08:00")], "o.jsonl")
    counts = import_file(store, other, engine)
    assert (counts.imported, counts.skipped) == (1, 2)
    assert rows(store, "SELECT body FROM inbound_message") == [("擦除之后",)]


def test_the_format_comes_from_the_name_or_the_option(tmp_path):
    assert file_format(tmp_path / "a.JSONL", None) == "jsonl" and file_format(tmp_path / "a.csv", None) == "csv"
    assert file_format(tmp_path / "a.txt", "csv") == "csv"
    with pytest.raises(KefuError, match="--format"):
        file_format(tmp_path / "a.txt", None)
    with pytest.raises(KefuError, match="jsonl or csv"):
        file_format(tmp_path / "a.txt", "xml")


def test_the_command_imports_prints_counts_and_refuses_a_bad_file(kefu, store, shop, tmp_path):
    from worker.cli import cli

    path = jsonl(tmp_path, CONVERSATION)
    done = kefu.invoke(cli, ["import", "history", str(path), "--account", "shop"])
    assert done.exit_code == 0, done.output
    assert "h.jsonl: 3 imported, 0 already present, 0 skipped" in done.output
    again = kefu.invoke(cli, ["import", "history", str(path), "--account", "shop", "--json"])
    assert json.loads(again.output) == {
        "rows": 3,
        "imported": 0,
        "present": 3,
        "skipped": 0,
        "resumed_at": 3,
        "finished_before": True,
        "remembered": 0,
        "not_remembered": 0,
        "stopped_busy": False,
    }
    bad = jsonl(tmp_path, [line(role="robot")], "bad.jsonl")
    refused = kefu.invoke(cli, ["import", "history", str(bad), "--account", "shop"])
    assert refused.exit_code == 2 and "KEFU_IMPORT_INVALID" in refused.output and "line 1: role" in refused.output
    unknown = kefu.invoke(cli, ["import", "history", str(path), "--account", "nobody"])
    assert unknown.exit_code == 2 and "KEFU_ACCOUNT_UNKNOWN" in unknown.output


def test_times_outside_what_kefu_keeps_are_refused(tmp_path):
    path = jsonl(tmp_path, [line(at="1960-01-01T00:00:00Z")])
    with pytest.raises(ImportRejected, match="line 1: occurred_at"):
        parse_file(path, path.read_bytes(), "jsonl", "shop")
