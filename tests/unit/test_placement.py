"""Moving an account between shards (runtime.placement.slices): a slice built by kefu's own ingest, turn,
memory and outbox paths on one store, imported into a second store (customer ids kept: each
shard gives out its own range; message ids renumbered), then removed from the source or discarded
on the target."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import zstandard

from config import Settings, load_settings
from runtime.accounts.credentials import save_credentials
from runtime.accounts.registry import AccountSpec, create_account, delete_account, load_account
from runtime.admission.batches import evaluate
from runtime.admission.routes import RouteSpec, create_route
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.session_log import SessionLog, read_frames
from runtime.agent.sessions import damaged_folder, session_path
from runtime.agent.turn import run_turn
from runtime.customers.erasure import erase_customer
from runtime.customers.summaries import ack_customer_read
from runtime.errors import KefuError
from runtime.inbound.inbox import record_received
from runtime.inbound.ingest import ingest_page
from runtime.inbound.input_pause import is_paused
from runtime.inbound.pages import ConversationGroup, InboundMessage, InboundPage, Sender, TextContent
from runtime.memory.engine import MemoryEngine, scope_of
from runtime.memory.jobs import SessionJobs, archive_job
from runtime.memory.recall import RecallIndex, load_state
from runtime.memory.store import MemoryStore
from runtime.outbox.requests import AttemptGrant, begin_attempt, record_sent
from runtime.placement.shards import customer_id_base
from runtime.placement.slices import (
    AccountSlice,
    decode_slice,
    discard_import,
    encode_slice,
    export_slice,
    import_slice,
    remove_slice,
)
from runtime.ports import SendReceipt
from runtime.store import DeliveryStore
from transports.simulator import SimulatedPlatform, SimulatorTransport

KNOWLEDGE = load_knowledge(None)
CHAT = ["你好，在吗？", "今天下单什么时候发货？", "发什么快递？", "可以开发票吗", "这款是什么材质的？", "有优惠券吗"]
CHAT += ["能用花呗分期吗？", "枕套的尺寸多大？", "收到有破损怎么办", "好的，谢谢"]
SECRET = {"token": "t-1"}


@dataclass
class Shard:
    settings: Settings
    store: DeliveryStore
    memory: MemoryStore
    customer: int = 0  # the source's customer with the long, archived conversation

    @property
    def dirs(self) -> tuple[DeliveryStore, MemoryStore, Path, None]:
        return self.store, self.memory, self.settings.sessions_dir, None


def shard(data_dir: Path, name: str) -> Shard:
    """A shard's stores as a worker of it opens them: customer ids from the shard's own range."""
    settings = load_settings(data_dir=data_dir, shard=name)
    store = DeliveryStore(settings.delivery_path, settings.delivery, customer_id_base=customer_id_base(name))
    return Shard(settings, store, MemoryStore(settings.memory_path))


def page(account: str, n: int, buyer: str, text: str = "在吗", cursor: str = "", stream: str = "sim") -> InboundPage:
    message = InboundMessage(
        platform_message_id=f"{account}-m{n}",
        sender=Sender(id=buyer, display_name="买家", role="buyer"),
        content=TextContent(text=text),
        occurred_at=datetime.now(UTC),
        direct_peer_id=buyer,
    )
    group = ConversationGroup(conversation_id=f"conv-{buyer}", conversation_type="direct", messages=[message])
    return InboundPage(
        account_id=account, stream_id=stream, cursor=cursor or f"c{n}", page_op_id=f"{account}-p{n}", groups=[group]
    )


def say(source: Shard, transport: SimulatorTransport, platform: SimulatedPlatform, buyer: str, text: str) -> int:
    """A buyer's line through ingest, admission and a rules-agent turn with memory, archiving
    when the turn asks for it (what the worker's tasks do)."""
    settings = source.settings
    memory = MemoryEngine(
        source.memory, settings.memory.model_copy(update={"allow_small_window": True}), 1000, settings.zone, False
    )
    message = platform.buyer_says("shop", buyer, buyer, text)
    customer = ingest_page(source.store, transport.page_of("shop", [message])).customer_ids[0]
    evaluate(source.store, customer, 1000)
    result = run_turn(
        source.store, RulesProvider(KNOWLEDGE), customer, settings.sessions_dir, settings.zone, settings.agent,
        memory_engine=memory,
    )  # fmt: skip
    assert result is not None
    if result.archive_due:
        SessionJobs(source.store, settings.sessions_dir, memory, 60).run(customer, archive_job)
    return customer


def damage(path: Path) -> None:
    """Damage before the tail (a flipped byte in frame 1 of 4): the log is corrupt, not torn."""
    log = SessionLog(path)
    log.load()
    for n in range(3):
        log.append("im/message-read", request_id=f"r{n}", platform_message_id=f"p{n}", read_at=0, text="已读")
        log.flush()
    data = bytearray(path.read_bytes())
    start, end, _ = read_frames(bytes(data))[1]
    data[(start + end) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture
def source(settings: Settings, store: DeliveryStore, shop: str, platform, transport) -> Shard:
    """The shop on shard a: two conversations (one long enough to archive), one reply sent, a
    read watermark, a credential, and a page received but not ingested yet."""
    here = Shard(settings, store, MemoryStore(settings.memory_path))
    for text in [*CHAT, "发票怎么开？"]:  # the last one recalls an archived folder
        here.customer = say(here, transport, platform, "b1", text)
    damage(session_path(settings.sessions_dir, f"s{say(here, transport, platform, 'b2', '有优惠券吗')}-1"))
    say(here, transport, platform, "b2", "还有别的颜色吗")  # retires the damaged session: kept under damaged/
    with store.write() as conn:
        save_credentials(conn, "shop", SECRET)
        first = conn.execute("SELECT request_id FROM outbox_request ORDER BY created_at LIMIT 1").scalar()
        middle = conn.execute("SELECT id FROM inbound_message ORDER BY id LIMIT 1 OFFSET 4").scalar()
    grant = begin_attempt(store, first, "test", 60)
    assert isinstance(grant, AttemptGrant)
    record_sent(store, first, grant.attempt_no, SendReceipt(platform_message_id="pm-1"))
    ack_customer_read(store, here.customer, "ops", middle)
    assert record_received(store, transport.page_of("shop", [platform.buyer_says("shop", "b3", "b3", "还在吗")]))
    return here


def with_other_account(there: Shard) -> Shard:
    """The shard with an account of its own: three customers and message ids 1..4."""
    create_account(there.store, AccountSpec(id="other", platform="simulator", identity="seller-2"))
    create_route(there.store, RouteSpec(id="other-direct", account_id="other", conversation_type="direct"), "op-o")
    for n, buyer in enumerate(["x1", "x2", "x3", "x1"]):
        ingest_page(there.store, page("other", n, buyer))
    return there


@pytest.fixture
def target(tmp_path: Path) -> Shard:
    """Shard b with an account of its own: its customer ids are from b's range, its message ids
    1.. are the source's too."""
    return with_other_account(shard(tmp_path / "b", "shard-b"))


def rows(store: DeliveryStore, query: str, **args: object) -> list[tuple]:
    with store.read() as conn:
        return [tuple(r) for r in conn.execute(query, tuple(args.values()) if args else ())]


def conversations(store: DeliveryStore) -> dict[str, list[tuple]]:
    """Per conversation of the shop: its lines, outbox requests and unread count per reader."""
    out: dict[str, list[tuple]] = {}
    for customer_id, conversation in rows(store, "SELECT id, conversation_id FROM customer WHERE account_id = 'shop'"):
        lines = rows(
            store,
            "SELECT sender_role, body, state, platform_message_id, batch_id FROM inbound_message"
            " WHERE customer_id = ? ORDER BY id",
            c=customer_id,
        )
        sends = rows(
            store,
            "SELECT request_id, state, body, platform_message_id, batch_id FROM outbox_request WHERE customer_id = ?"
            " ORDER BY created_at, request_id",
            c=customer_id,
        )
        unread = rows(
            store,
            "SELECT w.reader, (SELECT count(*) FROM inbound_message m WHERE m.customer_id = w.customer_id"
            " AND m.id > w.watermark) FROM reader_watermark w WHERE w.customer_id = ?",
            c=customer_id,
        )
        out[conversation] = [*lines, *sends, *unread]
    return out


def snapshot(*paths: Path) -> dict[str, list[str]]:
    """Every row of every table of these SQLite files, and the files next to them."""
    out: dict[str, list[str]] = {}
    for path in paths:
        db = sqlite3.connect(path)
        # The search index by its rows: its segments' layout may differ for the same rows.
        names = [
            r[0]
            for r in db.execute(
                "SELECT name FROM pragma_table_list WHERE schema = 'main' AND type IN ('table', 'virtual')"
                " AND name NOT LIKE 'sqlite_%'"
            )
        ]
        for name in names:
            out[f"{path.name}:{name}"] = sorted(map(repr, db.execute(f"SELECT * FROM {name}")))
        db.close()
        out[f"{path.parent}/*"] = sorted(str(p) for p in path.parent.rglob("*.zst"))
    return out


def target_snapshot(there: Shard) -> dict[str, list[str]]:
    """A discarded import may leave one trace: the high-water mark of the imported customers'
    id range (runtime.store.migrations V13), which only keeps new ids above theirs."""
    taken = snapshot(there.settings.delivery_path, there.settings.memory_path)
    taken.pop(f"{there.settings.delivery_path.name}:customer_id_high")
    return taken


def moved_slice(source: Shard) -> AccountSlice:
    return decode_slice(encode_slice(export_slice(*source.dirs, "shop", "shard-a", 7)))


def secret_of(source: Shard) -> str:
    [(secret,)] = rows(source.store, "SELECT secret FROM credential WHERE account_id = 'shop'")
    return str(secret)


def session_files(there: Shard) -> dict[str, bytes]:
    return {str(p.relative_to(there.settings.sessions_dir)): p.read_bytes() for p in session_dir_files(there)}


def session_dir_files(there: Shard) -> list[Path]:
    return sorted(there.settings.sessions_dir.rglob("*.jsonl.zst"))


def test_an_imported_slice_keeps_every_conversation_and_its_ids(source: Shard, target: Shard) -> None:
    before = conversations(source.store)
    customers = "SELECT id, conversation_id, session_id FROM customer WHERE account_id = 'shop' ORDER BY id"
    others = rows(target.store, "SELECT * FROM customer")
    slice_ = moved_slice(source)
    assert slice_.credential_ref == hashlib.sha256(secret_of(source).encode()).hexdigest()
    assert "t-1" not in encode_slice(slice_).decode("latin-1")  # zstd of JSON: the secret would show
    result = import_slice(*target.dirs, slice_, "move-1", "shard-b", secret_of(source))
    assert not result.replayed and result.customers == 2
    # Customer and session ids as they were; so are request and batch ids, per conversation with
    # its lines, states, sends and unread counts per reader (the watermark follows renumbering).
    assert rows(target.store, customers) == rows(source.store, customers)
    assert conversations(target.store) == before
    assert rows(target.store, "SELECT * FROM customer WHERE account_id = 'other'") == others
    assert result.messages == rows(source.store, "SELECT count(*) FROM inbound_message")[0][0]
    assert rows(target.store, "SELECT min(id) FROM inbound_message WHERE account_id = 'shop'") == [(5,)]
    assert rows(target.store, "SELECT secret FROM credential WHERE account_id = 'shop'") == [(secret_of(source),)]
    assert rows(target.store, "SELECT shard, generation, state FROM account_placement") == [("shard-b", 7, "importing")]
    with target.store.read() as conn:
        assert is_paused(conn, "shop") and not is_paused(conn, "other")
    # The page received but not ingested is still pending, and the cursor points at its own page.
    assert rows(target.store, "SELECT count(*) FROM received_page WHERE account_id = 'shop' AND ingested_at IS NULL")
    [(cursor, received)] = rows(target.store, "SELECT cursor, received_id FROM provider_cursor WHERE account_id='shop'")
    assert rows(source.store, "SELECT cursor FROM provider_cursor WHERE account_id = 'shop'") == [(cursor,)]
    [(page_json,)] = rows(target.store, "SELECT page FROM received_page WHERE id = ?", i=received)
    assert json.loads(page_json)["cursor"] == cursor

    # Session logs (the damaged one kept aside included) byte for byte under their names.
    assert session_files(target) == session_files(source) and len(session_files(source)) == result.sessions == 3
    requests = "SELECT request_id, session_id, tool_call_id FROM outbox_request ORDER BY request_id"
    assert rows(target.store, requests) == rows(source.store, requests)
    now = SessionLog(session_path(target.settings.sessions_dir, f"s{source.customer}-1"))
    assert [e.type for e in now.load()] and not now.torn_bytes

    # Memory: the same scope, plans, folders, texts and recall state; the index rebuilt here.
    scope = scope_of(source.customer)
    folders, old_folders = target.memory.folders(scope), source.memory.folders(scope)
    assert folders == old_folders and folders
    assert target.memory.session_plans(now.path.name.removesuffix(".jsonl.zst"))
    assert [target.memory.text(f.id) for f in folders] == [source.memory.text(f.id) for f in old_folders]
    recalled = RecallIndex.build(target.memory, scope).ranked("发票")
    assert recalled and recalled == RecallIndex.build(source.memory, scope).ranked("发票")
    block = load_state(target.memory, scope).block
    assert block and block == load_state(source.memory, scope).block
    assert [e.entries for e in now.events if e.type == "memory/recall"][-1][0]["folder_id"] in block

    # The damaged session of the other customer: its record kept, its kept file in b's folder.
    [(b2, kept, replaced_by)] = rows(source.store, "SELECT customer_id, kept_path, replaced_by FROM damaged_session")
    [(kept_here, replaced_here)] = rows(target.store, "SELECT kept_path, replaced_by FROM damaged_session")
    assert replaced_here == replaced_by == f"s{b2}-2"
    assert Path(kept_here) == damaged_folder(target.settings.sessions_dir) / f"s{b2}-1.jsonl.zst" != Path(kept)
    assert Path(kept_here).read_bytes() == Path(kept).read_bytes()


def test_a_customer_id_or_session_file_taken_here_refuses_the_import(source: Shard, tmp_path: Path) -> None:
    slice_ = moved_slice(source)
    # A shard giving out the same customer ids as the source: another account holds them.
    same_range = with_other_account(shard(tmp_path / "c", "default"))
    # A shard of its own range, but a log of the slice's is there with other bytes.
    stray = with_other_account(shard(tmp_path / "b", "shard-b"))
    path = session_path(stray.settings.sessions_dir, f"s{source.customer}-1")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"another log")
    for there, taken in [(same_range, "2 customer id(s) and 0 session"), (stray, "0 customer id(s) and 1 session")]:
        before, files = target_snapshot(there), session_files(there)
        with pytest.raises(KefuError) as refused:
            import_slice(*there.dirs, slice_, "move-1", "shard-b", secret_of(source))
        assert refused.value.code == "KEFU_PLACEMENT_ID_CONFLICT" and taken in str(refused.value)
        assert all(value not in str(refused.value) for value in ["s1-", "发票", "在吗", "another log"])
        assert target_snapshot(there) == before and session_files(there) == files


def test_importing_again_under_the_same_op_id_returns_the_recorded_result(source: Shard, target: Shard) -> None:
    slice_ = moved_slice(source)
    first = import_slice(*target.dirs, slice_, "move-1", "shard-b", None)
    after = target_snapshot(target)
    again = import_slice(*target.dirs, slice_, "move-1", "shard-b", None)
    assert again == first.model_copy(update={"replayed": True}) and target_snapshot(target) == after
    # A crash after the rows committed: the replay writes the files and memory, then marks them done.
    session_path(target.settings.sessions_dir, f"s{source.customer}-1").unlink()
    target.memory.delete_scope(scope_of(source.customer))
    with target.store.write() as conn:
        conn.execute("UPDATE placement_import SET files_done = 0")
    assert import_slice(*target.dirs, slice_, "move-1", "shard-b", None).replayed
    assert target_snapshot(target) == after


def test_a_cursor_this_shard_committed_for_the_account_refuses_the_import(source: Shard, target: Shard) -> None:
    create_account(target.store, AccountSpec(id="shop", platform="simulator", identity="seller-1"))
    [stream] = rows(source.store, "SELECT stream_id FROM provider_cursor")
    ingest_page(target.store, page("shop", 1, "b1", cursor="elsewhere", stream=stream[0]))
    with target.store.read() as conn:
        account = load_account(conn, "shop")
    assert account is not None
    delete_account(target.store, "shop", account.revision, "op-delete")  # a tombstone keeps its cursor
    before = target_snapshot(target)
    with pytest.raises(KefuError) as refused:
        import_slice(*target.dirs, moved_slice(source), "move-1", "shard-b", None)
    assert refused.value.code == "KEFU_CHECKPOINT_CURSOR_CONFLICT" and "elsewhere" not in str(refused.value)
    assert target_snapshot(target) == before


def test_a_tombstone_of_the_account_is_replaced_and_a_live_account_or_a_wrong_secret_refuse(
    source: Shard, tmp_path: Path
) -> None:
    """The account lived here before, in the source's range: its customer id and log (taken by
    the slice's first customer) are replaced, not a conflict."""
    there, slice_ = shard(tmp_path / "c", "default"), moved_slice(source)
    [cursor] = slice_.tables["provider_cursor"]
    create_account(there.store, AccountSpec(id="shop", platform="simulator", identity="seller-1"))
    page_ = page("shop", 1, "old", "旧的消息", str(cursor["cursor"]), str(cursor["stream_id"]))
    assert ingest_page(there.store, page_).customer_ids == [source.customer]
    log = session_path(there.settings.sessions_dir, f"s{source.customer}-1")
    log.parent.mkdir(parents=True)
    log.write_bytes(b"the earlier log")
    before = target_snapshot(there)
    for credential, code in [(None, "KEFU_PLACEMENT_ACCOUNT_EXISTS"), ("{}", "KEFU_PLACEMENT_CREDENTIAL_MISMATCH")]:
        if code.endswith("MISMATCH"):
            with there.store.read() as conn:
                account = load_account(conn, "shop")
            assert account is not None
            delete_account(there.store, "shop", account.revision, "op-delete")
            before = target_snapshot(there)
        with pytest.raises(KefuError) as refused:
            import_slice(*there.dirs, slice_, "move-1", "shard-b", credential)
        assert refused.value.code == code and target_snapshot(there) == before
    import_slice(*there.dirs, slice_, "move-1", "shard-b", secret_of(source))
    assert rows(there.store, "SELECT deleted_at FROM account WHERE id = 'shop'") == [(None,)]
    assert not rows(there.store, "SELECT 1 FROM inbound_message WHERE body = '旧的消息'")
    assert conversations(there.store) == conversations(source.store)
    assert session_files(there) == session_files(source)


def mutated(slice_: AccountSlice, change: str) -> bytes:
    data = slice_.model_dump(mode="json")
    tables = data["tables"]
    if change == "unknown table":
        tables["lease"] = [{"name": "x", "owner": "y", "expires_at": 0}]
    elif change == "unknown column":
        tables["customer"][0]["nickname"] = "张三"
    elif change == "another account's row":
        tables["inbound_message"][0]["account_id"] = "acct-zz9"
    elif change == "foreign customer":
        tables["reader_watermark"][0]["customer_id"] = 999
    elif change == "foreign session":
        tables["outbox_request"][0]["session_id"] = "s999-1"
    elif change == "wrong shape":
        data["version"] = 2
    elif change == "foreign session file":
        data["sessions"]["../s999-1.jsonl.zst"] = ""
    return zstandard.ZstdCompressor().compress(json.dumps(data).encode())


CHANGES = ["unknown table", "unknown column", "another account's row", "foreign customer", "foreign session"]
CHANGES += ["wrong shape", "foreign session file", "not zstd", "not json"]


@pytest.mark.parametrize("change", CHANGES)
def test_a_corrupt_or_foreign_slice_is_refused_naming_fields_not_values(
    source: Shard, target: Shard, change: str
) -> None:
    if change == "not zstd":
        blob = b"{}"
    elif change == "not json":
        blob = zstandard.ZstdCompressor().compress(b'{"version": 1, "tables": ')
    else:
        blob = mutated(export_slice(*source.dirs, "shop", "shard-a", 7), change)
    with pytest.raises(KefuError) as invalid:
        decode_slice(blob)
    assert invalid.value.code == "KEFU_PLACEMENT_SLICE_INVALID"
    message = str(invalid.value)
    assert all(value not in message for value in ["张三", "acct-zz9", "999", "在吗", "发票"])
    expected = {"unknown table": "tables.lease", "unknown column": "tables.customer.nickname"}
    expected |= {"another account's row": "tables.inbound_message.account_id", "wrong shape": "version"}
    expected |= {"foreign customer": "tables.reader_watermark.customer_id", "foreign session file": "sessions"}
    expected |= {"foreign session": "tables.outbox_request.session_id"}
    assert expected.get(change, "slice") in message


def test_removing_a_moved_slice_leaves_only_pending_pages_and_a_moved_placement(source: Shard, tmp_path: Path) -> None:
    pending = [r[0] for r in rows(source.store, "SELECT id FROM received_page WHERE ingested_at IS NULL")]
    assert pending
    import_slice(*shard(tmp_path / "b", "shard-b").dirs, moved_slice(source), "move-1", "shard-b", None)
    assert remove_slice(*source.dirs, "shop", "shard-b", 7) == pending
    left = {
        table: rows(source.store, f"SELECT count(*) FROM {table}")[0][0]
        for table in ["account", "route", "credential", "customer", "inbound_message", "outbox_request", "media"]
        + ["outbox_attempt", "reader_watermark", "page_receipt", "group_receipt", "provider_cursor", "admission_batch"]
    }
    assert set(left.values()) == {0}
    assert [r[0] for r in rows(source.store, "SELECT id FROM received_page")] == pending
    assert rows(source.store, "SELECT shard, generation, state FROM account_placement") == [("shard-b", 7, "moved")]
    assert not list(source.settings.sessions_dir.rglob("*.zst")) and not source.memory.scopes()
    after = snapshot(source.settings.delivery_path, source.settings.memory_path)
    assert remove_slice(*source.dirs, "shop", "shard-b", 7) == pending
    assert snapshot(source.settings.delivery_path, source.settings.memory_path) == after


def test_discarding_an_import_restores_the_target_as_it_was(source: Shard, target: Shard) -> None:
    before = target_snapshot(target)
    result = import_slice(*target.dirs, moved_slice(source), "move-1", "shard-b", secret_of(source))
    assert target_snapshot(target) != before and target.memory.scopes()
    assert not discard_import(*target.dirs, "another-op")
    assert discard_import(*target.dirs, result.op_id)
    assert target_snapshot(target) == before and not target.memory.scopes()
    assert not discard_import(*target.dirs, result.op_id)
    # Once the move flipped (the account is active here) an import is no longer discarded.
    import_slice(*target.dirs, moved_slice(source), "move-2", "shard-b", None)
    with target.store.write() as conn:
        conn.execute("UPDATE account_placement SET state = 'active'")
    assert not discard_import(*target.dirs, "move-2")
    assert conversations(target.store) == conversations(source.store)


def test_a_moved_slice_raises_none_of_its_alerts_again(source: Shard, target: Shard) -> None:
    from runtime.admission.handling import pause_handling
    from runtime.outbox.manual import ManualSend, send_manual
    from runtime.outbox.requests import AttemptSkipped, begin_attempt, record_failure
    from runtime.ports import SendFailure

    fresh = ingest_page(source.store, page("shop", 99, "buyer-z")).customer_ids[0]  # nothing of it on its way
    send_manual(source.store, ManualSend(request_id="op-1", customer_id=fresh, text="在的"))
    grant = begin_attempt(source.store, "op-1", "w", 60)
    assert not isinstance(grant, AttemptSkipped)
    record_failure(source.store, "op-1", grant.attempt_no, SendFailure("unknown", "TIMEOUT"))
    pause_handling(source.store, source.customer, "handoff: x", handoff=True)
    assert {"send-unknown", "handoff"} <= {kind for (kind,) in rows(source.store, "SELECT kind FROM alert")}
    import_slice(*target.dirs, moved_slice(source), "move-1", "shard-b", secret_of(source))
    assert rows(target.store, "SELECT state FROM outbox_request WHERE request_id = 'op-1'") == [("result-unknown",)]
    assert rows(target.store, "SELECT handed_off FROM customer WHERE id = ?", c=source.customer) == [(1,)]
    assert rows(target.store, "SELECT count(*) FROM alert") == [(0,)]  # raised where they happened, once


def test_an_erased_buyer_stays_erased_on_the_accounts_new_shard(source: Shard, target: Shard) -> None:
    [erased] = rows(source.store, "SELECT id FROM customer WHERE account_id = 'shop' AND conversation_id LIKE '%b2%'")
    erase_customer(*source.dirs[:3], None, erased[0], "tester")
    slice_ = moved_slice(source)
    assert [r["erased_customer"] for r in slice_.tables["erasure"]] == [erased[0]]
    import_slice(*target.dirs, slice_, "move-1", "shard-b", secret_of(source))
    assert rows(target.store, "SELECT erased_customer, operator FROM erasure") == [(erased[0], "tester")]
    assert not any("b2" in name for name in slice_.sessions)
