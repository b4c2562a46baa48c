"""Media (magic bytes, size limit, an immutable stored copy, ordered attachments) and the
Wangwang direct recipient rule (SPEC 3.8)."""

from __future__ import annotations

import json
import struct
from zoneinfo import ZoneInfo

import pytest

from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.batches import evaluate, load_customer, open_batch
from runtime.admission.routes import RouteSpec, create_route
from runtime.agent.tools import TurnBinding, execute
from runtime.errors import KefuError
from runtime.inbound.ingest import ingest_page
from runtime.inbound.media import media_body
from runtime.inbound.pages import parse_page
from runtime.outbox.manual import ManualSend, query_manual, send_manual, send_manual_parts
from runtime.outbox.media import AttachmentPolicy, describe, read_media_file
from runtime.outbox.requests import AttemptGrant, AttemptSkipped, begin_attempt, record_failure, record_sent
from runtime.ports import SendFailure, ToolCall

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 32
JPEG = b"\xff\xd8\xff\xe0" + b"\0" * 32
GIF = b"GIF89a" + b"\0" * 32
BMP = b"BM" + struct.pack("<IHHI", 66, 0, 0, 54) + struct.pack("<I", 40) + b"\0" * 40


@pytest.mark.parametrize(
    ("data", "name", "kind", "completed"),
    [
        (PNG, "photo", "image", "photo.png"),
        (JPEG, "photo.jpeg", "image", "photo.jpeg"),
        (JPEG, "photo.png", "image", "photo.png.jpg"),
        (GIF, "a.GIF", "image", "a.GIF"),
        (BMP, "scan", "image", "scan.bmp"),
        (b"BM not really a bitmap", "notes.txt", "file", "notes.txt"),
        (b"%PDF-1.7", "invoice.pdf", "file", "invoice.pdf"),
    ],
)
def test_images_are_recognised_by_their_bytes_and_names_get_the_proven_extension(data, name, kind, completed):
    assert describe(data, name)[:2] == (kind, completed)


def test_size_limit_empty_files_and_paths_outside_the_attachments_folder(tmp_path):
    big = tmp_path / "big.png"
    big.write_bytes(PNG + b"\0" * 100)
    with pytest.raises(KefuError) as too_big:
        read_media_file(big, max_bytes=64)
    assert too_big.value.code == "KEFU_MEDIA_INVALID" and "limit is 64" in too_big.value.message
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(KefuError, match="empty"):
        read_media_file(tmp_path / "empty", max_bytes=64)
    with pytest.raises(KefuError, match="cannot read"):
        read_media_file(tmp_path / "missing.png", max_bytes=64)
    policy = AttachmentPolicy(tmp_path / "files", 1024)
    with pytest.raises(KefuError, match="outside the attachments folder"):
        policy.resolve("../big.png")


@pytest.fixture
def customer(store, shop, platform, transport) -> int:
    return ingest_page(
        store, transport.page_of(shop, [platform.buyer_says(shop, "b1", "张三", "有图吗")])
    ).customer_ids[0]


def test_a_stored_copy_is_sent_after_the_source_file_is_gone(store, customer, transport, platform, tmp_path):
    source = tmp_path / "size-chart"
    source.write_bytes(PNG)
    data, name = read_media_file(source, max_bytes=1024)
    request = send_manual(store, ManualSend(request_id="pic-1", customer_id=customer, file_name=name, file_data=data))
    source.unlink()
    assert (request.content_type, request.body) == ("image", "size-chart.png")
    grant = begin_attempt(store, "pic-1", "w", lease_s=60)
    assert grant.send.media.data == PNG and grant.send.media.mime == "image/png"
    record_sent(store, "pic-1", grant.attempt_no, transport.send(grant.send))
    received = platform.received_by_ref("pic-1")
    assert (received.kind, received.text) == ("image", "size-chart.png")
    with store.read() as conn:
        mirror = conn.execute(
            "SELECT sender_role, content_type, body FROM inbound_message"
            " WHERE platform_message_id = 'console-manual:pic-1'"
        ).one()
    assert tuple(mirror)[:2] == ("human-console", "image")
    shown = media_body(mirror[2])  # the shop's own copy: stored, never fetched from the platform
    assert (shown.state, shown.mime, shown.size) == ("stored", "image/png", len(PNG))


def test_a_part_after_a_failed_or_unknown_part_is_never_submitted(store, customer, tmp_path):
    file_part = ManualSend(request_id="p-file", customer_id=customer, file_name="a.png", file_data=PNG)
    send_manual_parts(store, [file_part, ManualSend(request_id="p-text", customer_id=customer, text="见图")])
    assert begin_attempt(store, "p-text", "w", lease_s=60) == AttemptSkipped("waiting-for-earlier")
    grant = begin_attempt(store, "p-file", "w", lease_s=60)
    record_failure(store, "p-file", grant.attempt_no, SendFailure("unknown", "TimeoutError"))
    assert begin_attempt(store, "p-text", "w", lease_s=60) == AttemptSkipped("skipped")
    skipped = query_manual(store, "p-text")
    assert (skipped.state, skipped.error_code) == ("skipped", "KEFU_EARLIER_PART_NOT_SENT")


def wangwang_page(op: str, messages: list[dict]) -> dict:
    group = {"conversation_id": "ww-conv-1", "conversation_type": "direct", "messages": messages}
    return {"account_id": "ww", "stream_id": "s", "cursor": op, "page_op_id": op, "groups": [group]}


def message(mid: str, sender: str, role: str = "buyer", peer: str | None = None) -> dict:
    return {
        "platform_message_id": mid,
        "sender": {"id": sender, "display_name": sender, "role": role},
        "content": {"type": "text", "text": "你好"},
        "occurred_at": "2026-11-30T06:05:00+00:00",
        "direct_peer_id": peer,
    }


@pytest.fixture
def wangwang(store) -> None:
    create_account(store, AccountSpec(id="ww", platform="wangwang", identity="seller-ww"))
    create_route(store, RouteSpec(id="ww-all", account_id="ww", conversation_type="direct"), op_id="op-ww")


def test_wangwang_replies_go_to_the_last_external_sender_else_the_stored_peer_else_nowhere(store, wangwang):
    # The seller spoke first: no buyer observed, no peer stored.
    customer = ingest_page(store, parse_page(wangwang_page("p1", [message("m1", "seller", "native_operator")])))
    customer_id = customer.customer_ids[0]
    refused = send_manual(store, ManualSend(request_id="ww-1", customer_id=customer_id, text="在吗"))
    assert (refused.state, refused.error_code) == ("failed", "WANGWANG_DIRECT_RECIPIENT_UNAVAILABLE")
    assert begin_attempt(store, "ww-1", "w", lease_s=60) == AttemptSkipped("settled")  # never reaches a platform

    ingest_page(store, parse_page(wangwang_page("p2", [message("m2", "seller", "native_operator", "cntaobao买家甲")])))
    peer = send_manual(store, ManualSend(request_id="ww-2", customer_id=customer_id, text="在吗"))
    assert peer.recipient_id == "cntaobao买家甲"

    ingest_page(store, parse_page(wangwang_page("p3", [message("m3", "cntaobao买家乙")])))
    observed = send_manual(store, ManualSend(request_id="ww-3", customer_id=customer_id, text="在吗"))
    assert observed.recipient_id == "cntaobao买家乙"  # an observed sender beats the stored peer
    assert "ww-conv-1" not in {peer.recipient_id, observed.recipient_id}


def binding_for(store, customer_id: int, policy: AttachmentPolicy | None) -> TurnBinding:
    evaluate(store, customer_id, 1000)
    with store.read() as conn:
        customer, batch = load_customer(conn, customer_id), open_batch(conn, customer_id)
    return TurnBinding(store, customer, batch, "s-1", 1, ZoneInfo("Asia/Shanghai"), attachments=policy)


def test_the_tool_reports_the_wangwang_rule_in_words_the_model_can_act_on(store, wangwang):
    customer_id = ingest_page(store, parse_page(wangwang_page("p1", [message("m1", "seller", "native_operator")])))
    customer_id = customer_id.customer_ids[0]
    with store.write() as conn:  # make the seller's line admissible so a turn exists
        conn.execute("UPDATE inbound_message SET sender_role = 'human-native'")
    outcome = execute(
        binding_for(store, customer_id, None), ToolCall(id="c1", name="im_send_message", arguments='{"text": "您好"}')
    )
    assert outcome.is_error
    assert outcome.content.startswith(
        f"Error: IM reply failed (WANGWANG_DIRECT_RECIPIENT_UNAVAILABLE {outcome.request_id}):"
    )
    assert "Do not use the conversation id as the recipient." in outcome.content


def test_attachments_are_registered_in_order_before_the_text_or_not_at_all(store, customer, tmp_path):
    folder = tmp_path / "attachments"
    folder.mkdir()
    (folder / "chart.png").write_bytes(PNG)
    (folder / "manual.pdf").write_bytes(b"%PDF-1.7 ...")
    binding = binding_for(store, customer, AttachmentPolicy(folder, 1024))
    sent: list[str] = []
    binding.on_registered = sent.append

    bad = {"text": "见附件", "attachments": ["chart.png", "../secret.txt"]}
    outcome = execute(binding, ToolCall(id="c1", name="im_send_message", arguments=json.dumps(bad)))
    assert outcome.is_error and "outside the attachments folder" in outcome.content and sent == []
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM outbox_request").scalar_one() == 0
        assert conn.execute("SELECT count(*) FROM media").scalar_one() == 0

    good = {"text": "见附件", "attachments": ["chart.png", "manual.pdf"]}
    outcome = execute(binding, ToolCall(id="c2", name="im_send_message", arguments=json.dumps(good)))
    assert not outcome.is_error and sent[-1] == outcome.request_id and len(sent) == 3
    with store.read() as conn:
        parts = conn.execute("SELECT request_id, content_type, body, follows FROM outbox_request ORDER BY rowid").all()
    assert [(p[1], p[2]) for p in parts] == [("image", "chart.png"), ("file", "manual.pdf"), ("text", "见附件")]
    assert [p[3] for p in parts] == [None, parts[0][0], parts[1][0]]
    assert isinstance(begin_attempt(store, parts[0][0], "w", lease_s=60), AttemptGrant)
    assert begin_attempt(store, parts[2][0], "w", lease_s=60) == AttemptSkipped("waiting-for-earlier")

    without_folder = binding_for(store, customer, None)
    refused = execute(
        without_folder, ToolCall(id="c3", name="im_send_message", arguments='{"text": "图", "attachments": ["a.png"]}')
    )
    assert refused.is_error and "KEFU_MEDIA_INVALID" in refused.content


@pytest.mark.parametrize(
    ("sent_as", "goes_out_as"),
    [("C:\\fakepath\\chart.png", "chart.png"), ("../../chart.png", "chart.png"), ("ch\r\nart.png", "chart.png")],
)
def test_a_file_goes_out_under_its_own_name_only(sent_as, goes_out_as):
    assert describe(PNG, sent_as)[1] == goes_out_as


@pytest.mark.parametrize("name", ["", "../", "\x00\x01", "a/.."])
def test_a_file_without_a_usable_name_is_refused(name):
    with pytest.raises(KefuError, match="KEFU_MEDIA_INVALID"):
        describe(PNG, name)
