"""The cost of fetching and storing one buyer image (runtime.inbound.media.fetch_media).

A local fake DingTalk (the test suite's, over loopback HTTP) holds --count pictures of --kib
KiB each; each one arrives as a picture message through ingest, then kefu fetches it the way the
worker's `kefu.ingest.fetch_media` task does: the download code through the OpenAPI (a token,
then `messageFiles/download` for a URL), the bytes read within the size limit, checked to be an
image, stored content-addressed in the delivery store, the outcome written into the message.
The baseline, in the same run: the same two HTTP requests with a bare httpx client and the
bytes inserted into a SQLite table with raw sqlite3, one transaction each.

    python -m bench.images [--count 200] [--kib 200]
"""

from __future__ import annotations

import argparse
import hashlib
import sqlite3
import statistics
import struct
import tempfile
import time
import zlib
from datetime import UTC, datetime
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from config import load_settings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.inbound.ingest import ingest_page
from runtime.inbound.media import fetch_media
from runtime.inbound.pages import ConversationGroup, ImageContent, InboundMessage, InboundPage, Sender
from runtime.store import DeliveryStore
from tests.fakes.dingtalk import FakeDingTalk
from transports.dingtalk import DingTalkCredentials, DingTalkTransport


def picture(kib: int, n: int) -> bytes:
    """A PNG of about `kib` KiB (a text chunk of random-looking bytes), different for each n."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    filler = hashlib.sha256(str(n).encode()).digest() * (kib * 1024 // 32)
    header = chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
    return b"\x89PNG\r\n\x1a\n" + header + chunk(b"teXt", filler) + chunk(b"IEND", b"")


def page(n: int, code: str) -> InboundPage:
    message = InboundMessage(
        platform_message_id=f"pic-{n}",
        sender=Sender(id="staff-1", role="buyer"),
        content=ImageContent(ref=code),
        occurred_at=datetime.now(UTC),
        direct_peer_id="staff-1",
    )
    group = ConversationGroup(conversation_id="cid-1", conversation_type="direct", messages=[message])
    return InboundPage(account_id="ding", stream_id="dingtalk-robot", cursor=str(n), page_op_id=f"p{n}", groups=[group])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--kib", type=int, default=200)
    args = parser.parse_args()
    fake = FakeDingTalk().start()
    codes = []
    for n in range(args.count):
        codes.append(f"code-{n}")
        fake.files[codes[-1]] = picture(args.kib, n)
    with tempfile.TemporaryDirectory() as folder:
        settings = load_settings(
            data_dir=Path(folder), dingtalk={"openapi_url": fake.url, "oapi_url": fake.url, "timeout_s": 5}
        )
        store = DeliveryStore(settings.delivery_path, settings.delivery)
        create_account(store, AccountSpec(id="ding", platform="dingtalk", identity=fake.robot_code))
        credentials = DingTalkCredentials(
            client_id=fake.client_id, client_secret=fake.client_secret, robot_code=fake.robot_code
        )
        transport = DingTalkTransport(settings.dingtalk, lambda _: credentials)
        ids = [ingest_page(store, page(n, code)).media[0] for n, code in enumerate(codes)]

        kefu = []
        for message_id in ids:
            began = time.perf_counter()
            body = fetch_media(store, lambda _: transport, message_id, settings.media_max_bytes)
            kefu.append(time.perf_counter() - began)
            assert body is not None and body.state == "stored"

        raw, db = [], sqlite3.connect(Path(folder) / "raw.sqlite", isolation_level=None)
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("CREATE TABLE media (sha256 TEXT PRIMARY KEY, data BLOB NOT NULL)")
        with httpx.Client(timeout=5) as http:
            token = http.post(
                f"{fake.url}/v1.0/oauth2/accessToken", json={"appKey": fake.client_id, "appSecret": fake.client_secret}
            ).json()["accessToken"]
            for code in codes:
                began = time.perf_counter()
                url = http.post(
                    f"{fake.url}/v1.0/robot/messageFiles/download",
                    json={"downloadCode": code, "robotCode": fake.robot_code},
                    headers={"x-acs-dingtalk-access-token": token},
                ).json()["downloadUrl"]
                data = http.get(url).content
                db.execute("BEGIN IMMEDIATE")
                db.execute("INSERT OR IGNORE INTO media VALUES (?, ?)", (hashlib.sha256(data).hexdigest(), data))
                db.execute("COMMIT")
                raw.append(time.perf_counter() - began)
        db.close()
        store.close()
        transport.close()
    fake.stop()
    table = Table(title=f"one buyer image of {args.kib} KiB, fetched and stored (median of {args.count})")
    table.add_column("path")
    table.add_column("ms per image", justify="right")
    table.add_row(
        "kefu: fetch_media (OpenAPI, size and type checks, store, outcome)", f"{statistics.median(kefu) * 1000:.2f}"
    )
    table.add_row("baseline: httpx, the same two requests + raw sqlite3 insert", f"{statistics.median(raw) * 1000:.2f}")
    Console().print(table)
    print(f"ratio kefu / baseline: {statistics.median(kefu) / statistics.median(raw):.2f}x")


if __name__ == "__main__":
    main()
