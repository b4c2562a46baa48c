"""Erasing one buyer on request: every trace of the conversation leaves every store and file,
a tombstone stays, a redelivered erased message is never stored again, the buyer's next message
starts a new customer, and erasing twice changes nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import zstandard

from config import RetentionSettings
from runtime.admission.batches import evaluate
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.turn import run_turn
from runtime.customers.erasure import erase_customer, plan_erasure
from runtime.customers.retention import DAY_MS, prune
from runtime.customers.summaries import list_customers
from runtime.errors import KefuError
from runtime.inbound.inbox import prune_ingested, record_received
from runtime.inbound.ingest import ingest_page
from runtime.memory.engine import scope_of
from runtime.memory.folders import ArchivedMessage, plan_folders
from runtime.memory.store import MemoryStore
from runtime.store import now_ms
from runtime.store.leases import claimed
from worker.cli import cli

ZONE = ZoneInfo("Asia/Shanghai")
SECRET = "订单A7731什么时候发货"  # what the erased buyer said: found nowhere afterwards
KEPT = "另一位顾客问发票"


def say(store, transport, platform, buyer, text):
    message = platform.buyer_says("shop", buyer, f"顾客{buyer}", text)
    page = transport.page_of("shop", [message])
    return ingest_page(store, page).customer_ids[0], page


def answer(store, settings, customer):
    evaluate(store, customer, 1000)
    return run_turn(store, RulesProvider(load_knowledge(None)), customer, settings.sessions_dir, ZONE, settings.agent)


def remember(settings, memory, customer, text):
    said = [ArchivedMessage(role="user", text=text, at_ms=1)]
    memory.commit_archive(scope_of(customer), f"plan-{customer}", plan_folders(said))
    image = settings.memory_images_dir / scope_of(customer) / "photo.png"
    image.parent.mkdir(parents=True, exist_ok=True)
    image.write_bytes(b"\x89PNG" + text.encode())


def traces(settings, text: str) -> list[str]:
    """Every file under the data dir holding the text, zstd frames opened (the simulated
    platform's own database is the platform's, not kefu's: left out)."""
    found = []
    for path in Path(settings.data_dir).rglob("*"):
        if not path.is_file() or path == settings.simulator_path or path.name.startswith(settings.simulator_path.name):
            continue
        data = path.read_bytes()
        if path.suffix == ".zst":
            data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
        if text.encode() in data:
            found.append(str(path.relative_to(settings.data_dir)))
    return found


@pytest.fixture
def two_buyers(settings, store, shop, transport, platform):
    """b1 (to erase) and b2 (to keep), each answered by the agent and remembered."""
    erased, page = say(store, transport, platform, "b1", SECRET)
    kept, _ = say(store, transport, platform, "b2", KEPT)
    for customer in (erased, kept):
        answer(store, settings, customer)
    memory = MemoryStore(settings.memory_path)
    remember(settings, memory, erased, SECRET)
    remember(settings, memory, kept, KEPT)
    yield erased, kept, page, memory
    memory.close()


def test_erasing_leaves_no_trace_of_the_buyer_and_keeps_everyone_else(settings, store, two_buyers):
    erased, kept, _, memory = two_buyers
    assert traces(settings, SECRET)  # the buyer's words are there to begin with

    plan = plan_erasure(store, memory, settings.sessions_dir, settings.memory_images_dir, erased)
    assert plan.dry_run and plan.erased_at is None
    assert plan.counts.messages == 1 and plan.counts.replies >= 1 and plan.counts.session_files == 1
    assert plan.counts.memory_folders >= 1 and plan.counts.memory_images == 1
    assert traces(settings, SECRET)  # a dry run changes nothing

    report = erase_customer(store, memory, settings.sessions_dir, settings.memory_images_dir, erased, "tester")
    assert not report.dry_run and report.operator == "tester"
    assert report.counts.model_dump(exclude={"pages"}) == plan.counts.model_dump(exclude={"pages"})
    assert traces(settings, SECRET) == []
    assert memory.folders(scope_of(erased)) == [] and memory.folders(scope_of(kept))
    with store.read() as conn:
        left = {
            table: conn.execute(f"SELECT count(*) FROM {table} WHERE customer_id = :c", {"c": erased}).scalar()
            for table in ("inbound_message", "outbox_request", "admission_batch", "buyer_read", "alert")
        }
        assert set(left.values()) == {0}, left
        assert conn.execute("SELECT count(*) FROM customer WHERE id = :c", {"c": erased}).scalar() == 0
        tombstone = conn.execute("SELECT operator, counts FROM erasure WHERE erased_customer = :c", {"c": erased})
        assert tombstone.one()[0] == "tester"
    assert traces(settings, KEPT)  # the other buyer keeps everything
    again = erase_customer(store, memory, settings.sessions_dir, settings.memory_images_dir, erased, "someone else")
    assert again.erased_at == report.erased_at and again.operator == "tester"  # idempotent: the same tombstone


def test_a_redelivered_erased_message_is_not_stored_and_the_next_one_starts_anew(
    settings, store, transport, platform, two_buyers
):
    erased, _, page, memory = two_buyers
    erase_customer(store, memory, settings.sessions_dir, settings.memory_images_dir, erased, "tester")
    redelivered = page.model_copy(update={"page_op_id": "reconnect-leftover"})
    assert ingest_page(store, redelivered).customer_ids == []
    assert traces(settings, SECRET) == []
    later, _ = say(store, transport, platform, "b1", "我又来了")
    assert later != erased  # a new customer: nothing of the erased one comes back with it
    with store.read() as conn:
        bodies = conn.execute("SELECT body FROM inbound_message WHERE customer_id = :c", {"c": later}).scalars()
        assert list(bodies) == ["我又来了"]


def test_a_page_kept_for_replay_loses_the_conversation_and_replays_without_it(
    settings, store, shop, transport, platform
):
    erased, _ = say(store, transport, platform, "b1", "第一句")
    pending = transport.page_of(
        "shop",
        [platform.buyer_says("shop", "b1", "顾客b1", SECRET), platform.buyer_says("shop", "b2", "顾客b2", KEPT)],
    )
    assert record_received(store, pending)  # received, not yet ingested
    report = erase_customer(store, None, settings.sessions_dir, None, erased, "tester")
    assert report.counts.pages == 2  # the first page, kept an hour after ingest, and the pending one
    assert traces(settings, SECRET) == [] and traces(settings, "第一句") == []
    stored = ingest_page(store, pending)  # the broker's copy, delivered after the erasure
    assert len(stored.customer_ids) == 1 and stored.customer_ids[0] != erased
    assert traces(settings, SECRET) == [] and traces(settings, KEPT)


def test_erasing_waits_for_the_agent_and_refuses_an_unknown_customer(settings, store, two_buyers):
    erased, _, _, memory = two_buyers
    with claimed(store, f"customer:{erased}", 60) as fence:
        with store.write() as conn:
            fence.check(conn)  # a turn holds the customer's writer lease
        with pytest.raises(KefuError, match="KEFU_ERASE_BUSY"):
            erase_customer(store, memory, settings.sessions_dir, settings.memory_images_dir, erased, "tester")
    assert traces(settings, SECRET)  # nothing half-erased
    with pytest.raises(KefuError, match="KEFU_CUSTOMER_UNKNOWN"):
        erase_customer(store, memory, settings.sessions_dir, settings.memory_images_dir, 999_999, "tester")


def test_a_redelivered_message_is_dropped_even_after_retention_pruned_the_conversation(settings, store, two_buyers):
    erased, _, page, memory = two_buyers
    later = now_ms() + 2 * DAY_MS  # two days on: the buyer's settled lines are pruned, the received pages long gone
    assert prune(store, settings.sessions_dir, RetentionSettings(delivery_days=1), now=later).messages == 2
    with store.write() as conn:
        conn.execute("UPDATE received_page SET ingested_at = ingested_at - :d", {"d": 2 * DAY_MS})
    assert prune_ingested(store) == 2
    report = erase_customer(store, memory, settings.sessions_dir, settings.memory_images_dir, erased, "tester")
    assert report.counts.messages == 0
    redelivered = page.model_copy(update={"page_op_id": "reconnect-leftover"})
    assert ingest_page(store, redelivered).customer_ids == []  # still the erased conversation's
    assert traces(settings, SECRET) == []


def test_an_erasure_says_when_a_reader_kept_the_write_ahead_log_from_being_emptied(settings, store, two_buyers):
    erased, _, _, memory = two_buyers
    reader = sqlite3.connect(settings.delivery_path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM customer").fetchone()  # a snapshot that still uses the log
    report = erase_customer(store, memory, settings.sessions_dir, settings.memory_images_dir, erased, "tester")
    assert report.wal_pending
    reader.execute("COMMIT")
    reader.close()
    again = erase_customer(store, memory, settings.sessions_dir, settings.memory_images_dir, erased, "tester")
    assert not again.wal_pending and again.erased_at == report.erased_at  # erasing again finishes it
    assert traces(settings, SECRET) == []


def test_the_cli_shows_a_dry_run_erases_once_and_refuses_a_group_without_group(
    kefu, settings, store, transport, platform, two_buyers
):
    erased, kept, _, _ = two_buyers
    dry = kefu.invoke(cli, ["customers", "erase", str(erased), "--dry-run"])
    assert dry.exit_code == 0 and "would erase" in dry.output and "session files" in dry.output
    assert traces(settings, SECRET)
    done = kefu.invoke(cli, ["customers", "erase", str(erased), "--yes"])
    assert done.exit_code == 0 and "erased at" in done.output
    assert traces(settings, SECRET) == []
    listed = kefu.invoke(cli, ["customers", "--source", "simulation", "--json"])
    assert listed.exit_code == 0 and str(kept) in listed.output and f'"id": {erased},' not in listed.output
    asked = platform.buyer_says("shop", "b3", "顾客b3", "@店铺 在吗", group="g1", mention=True)
    [group] = ingest_page(store, transport.page_of("shop", [asked])).customer_ids
    refused = kefu.invoke(cli, ["customers", "erase", str(group), "--yes"])
    assert refused.exit_code == 2 and "KEFU_ERASE_GROUP" in refused.output
    unknown = kefu.invoke(cli, ["customers", "erase", "999999", "--yes"])
    assert unknown.exit_code == 2 and "KEFU_CUSTOMER_UNKNOWN" in unknown.output


def test_the_search_index_keeps_no_piece_of_what_the_erased_buyer_said(settings, store, two_buyers):
    """The index (V32) holds a message's trigrams, case-folded; a deleted message's stay in its
    older segments until they are merged, which erasing does."""
    erased, kept, _, memory = two_buyers
    said = SECRET.lower()  # with a Chinese character: "773" is in any file's timestamps, "a77" in a hex digest
    pieces = [said[i : i + 3] for i in range(len(said) - 2) if any("\u4e00" <= c <= "\u9fff" for c in said[i : i + 3])]
    assert [piece for piece in pieces if traces(settings, piece)]  # "单a7" is only in the index
    erase_customer(store, memory, settings.sessions_dir, settings.memory_images_dir, erased, "tester")
    assert [piece for piece in pieces if traces(settings, piece)] == []
    assert [row.id for row in list_customers(store, "simulation", search=KEPT[:4])] == [kept]
    assert list_customers(store, "simulation", search=SECRET[:4]) == []
