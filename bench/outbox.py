"""Outbox throughput: register + attempt + settle per second on the runtime path, beside raw
SQLite doing the same row writes in the same run.

kefu's path per reply: `register_outbound` (one transaction), `begin_attempt` (one
transaction: the order, authorization and lease checks, the attempt row), the simulator
transport's send (its own ledger file), `record_sent` (one transaction). The raw baseline
makes the same row writes with the same three commit boundaries and the same ledger insert,
on files with the same schema and PRAGMAs, without kefu's checks.

    python -m bench.outbox [--requests 5000] [--customers 100]
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path

from rich.console import Console
from rich.table import Table

from config import load_settings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.batches import evaluate, open_batch
from runtime.admission.routes import RouteSpec, create_route
from runtime.inbound.ingest import ingest_page
from runtime.outbox.requests import AttemptGrant, begin_attempt, record_sent, register_outbound
from runtime.store import DeliveryStore, now_ms
from runtime.store.tables import OutboundIntent
from transports.simulator import SimulatedPlatform, SimulatorTransport


def run_kefu(folder: Path, requests: int, customers: int) -> float:
    settings = load_settings(data_dir=folder / "kefu")
    store = DeliveryStore(settings.delivery_path, settings.delivery)
    platform = SimulatedPlatform(settings.simulator_path)
    transport = SimulatorTransport(platform)
    create_account(store, AccountSpec(id="shop", platform="simulator", identity="bench"))
    create_route(store, RouteSpec(id="all", account_id="shop", conversation_type="direct"), op_id="route")
    said = [platform.buyer_says("shop", f"b{n}", f"买家{n}", "在吗") for n in range(customers)]
    customer_ids = ingest_page(store, transport.page_of("shop", said)).customer_ids
    for c in customer_ids:
        evaluate(store, c, 1000)
    with store.read() as conn:
        batches = [open_batch(conn, c) for c in customer_ids]
    intents = [
        OutboundIntent(
            request_id=f"r{n}",
            customer_id=batch.customer_id,
            account_id="shop",
            conversation_id=f"sim-direct-b{n % customers}",
            recipient_id=f"b{n % customers}",
            origin="auto",
            body=f"您好，您的订单{n}已经发货，请注意查收。",
            batch_id=batch.id,
            route_generation=batch.route_generation,
            handling_epoch=batch.handling_epoch,
        )
        for n, batch in ((n, batches[n % customers]) for n in range(requests))
    ]
    began = time.perf_counter()
    for intent in intents:
        with store.write() as conn:
            register_outbound(conn, intent)
        grant = begin_attempt(store, intent.request_id, "bench", lease_s=120)
        assert isinstance(grant, AttemptGrant), grant
        record_sent(store, intent.request_id, grant.attempt_no, transport.send(grant.send))
    elapsed = time.perf_counter() - began
    assert len(platform.received("shop")) == requests
    store.close()
    return elapsed


def run_raw(folder: Path, requests: int, customers: int) -> float:
    settings = load_settings(data_dir=folder / "raw")
    DeliveryStore(settings.delivery_path, settings.delivery).close()  # same schema and PRAGMAs
    db = sqlite3.connect(settings.delivery_path, isolation_level=None)
    db.execute("PRAGMA synchronous = NORMAL")
    ledger = SimulatedPlatform(settings.simulator_path)._connect()
    began = time.perf_counter()
    for n in range(requests):
        request_id, at, customer = f"r{n}", now_ms(), n % customers
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "INSERT INTO outbox_request (request_id, customer_id, account_id, conversation_id, recipient_id, origin,"
            " content_type, body, batch_id, route_generation, handling_epoch, state, created_at, updated_at)"
            " VALUES (?, ?, 'shop', ?, ?, 'auto', 'text', ?, 'b', 1, 0, 'pending', ?, ?)",
            (request_id, customer, f"c{customer}", f"b{customer}", f"您好，您的订单{n}已经发货，请注意查收。", at, at),
        )
        db.execute("COMMIT")
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "INSERT INTO outbox_attempt (request_id, attempt_no, state, owner, started_at)"
            " VALUES (?, 1, 'started', 'b', ?)",
            (request_id, at),
        )
        db.execute("UPDATE outbox_request SET state = 'sending', updated_at = ? WHERE request_id = ?", (at, request_id))
        db.execute("COMMIT")
        platform_id = f"simmsg-{uuid.uuid4().hex[:16]}"
        ledger.execute(
            "INSERT INTO received_send (platform_message_id, client_ref, account_id, conversation_id, recipient_id,"
            " text, received_at) VALUES (?, ?, 'shop', ?, ?, ?, ?)",
            (platform_id, request_id, f"c{customer}", f"b{customer}", "您好", at),
        )
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "UPDATE outbox_attempt SET state = 'sent', finished_at = ?, platform_message_id = ?"
            " WHERE request_id = ? AND attempt_no = 1",
            (at, platform_id, request_id),
        )
        db.execute(
            "UPDATE outbox_request SET state = 'sent', platform_message_id = ?, updated_at = ? WHERE request_id = ?",
            (platform_id, at, request_id),
        )
        db.execute("COMMIT")
    elapsed = time.perf_counter() - began
    db.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--customers", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        raw = run_raw(Path(tmp), args.requests, args.customers)
        kefu = run_kefu(Path(tmp), args.requests, args.customers)
    table = Table("path", "seconds", "replies/s", "ms per reply", title=f"outbox: {args.requests:,} replies")
    for name, seconds in [("raw SQLite, same row writes and commits", raw), ("kefu register + attempt + settle", kefu)]:
        table.add_row(
            name, f"{seconds:.2f}", f"{args.requests / seconds:,.0f}", f"{seconds / args.requests * 1000:.3f}"
        )
    Console().print(table)
    print(f"ratio kefu/raw: {raw / kefu:.1%}")


if __name__ == "__main__":
    main()
