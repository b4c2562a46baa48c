"""The commits a platform call follows or records are on disk when they return (PRAGMA
synchronous = FULL for that transaction); the others keep WAL's NORMAL. Traced on the store's
own connections while one buyer message goes through the pipeline."""

from __future__ import annotations

from bench.growth import run_inline
from runtime import pipeline
from runtime.store import DeliveryStore
from tests.local_services import Local
from transports.simulator import SimulatedPlatform, SimulatorTransport


def _traced(store: DeliveryStore) -> list[str]:
    """Every statement the store's connections run from now on."""
    statements: list[str] = []
    store.trace(statements.append)
    return statements


def _split(statements: list[str]) -> list[list[str]]:
    """Each write transaction's statements, after the PRAGMA set just before its BEGIN."""
    transactions: list[list[str]] = []
    current: list[str] = []
    before = None
    for statement in statements:
        if statement.startswith("PRAGMA synchronous"):
            before = statement
        elif statement == "BEGIN IMMEDIATE":
            current = [before or "", statement]
            before = None
        elif statement == "COMMIT" and current:
            transactions.append(current)
            current = []
        elif current:
            current.append(statement)
    return transactions


def _durable(transactions: list[list[str]], needle: str) -> list[bool]:
    return [t[0] == "PRAGMA synchronous = FULL" for t in transactions if any(needle in s for s in t)]


def test_receiving_and_sending_commit_durably_and_ingest_and_admission_do_not(
    settings, store: DeliveryStore, shop: str, platform: SimulatedPlatform, transport: SimulatorTransport
) -> None:
    services = Local(settings, store, transport=transport)  # type: ignore[arg-type]
    statements = _traced(store)
    page = transport.page_of(shop, [platform.buyer_says(shop, "b1", "张三", "什么时候发货？")])
    (ingest,) = pipeline.receive(services, page).follow_ups
    run_inline(services, ingest)  # each step a worker would run, here in order
    assert len(platform.received(shop)) == 1
    transactions = _split(statements)
    assert _durable(transactions, "INSERT OR IGNORE INTO received_page") == [True]  # the receiver ACKs next
    # The cursor is confirmed next, but the durable received record is the page's copy: a lost
    # ingest commit takes its mark with it, and the page is published again (runtime.inbound.ingest).
    assert _durable(transactions, "INSERT OR IGNORE INTO page_receipt") == [False]
    assert _durable(transactions, "INSERT INTO outbox_attempt") == [True]  # the send follows
    assert _durable(transactions, "UPDATE outbox_attempt SET state") == [True]  # the send's outcome
    assert _durable(transactions, "INSERT INTO admission_batch") == [False]  # nothing on the platform hangs on it
    with store.read() as conn:
        assert conn.execute("PRAGMA synchronous").scalar_one() == 1  # NORMAL again after each
