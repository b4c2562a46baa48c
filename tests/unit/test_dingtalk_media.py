"""A buyer's file, voice message and video on DingTalk (issue 42, item 4): paged by their download
codes, fetched through the robot file API of the local fake DingTalk over real HTTP as images are,
told by their bytes, stored content-addressed, linked and played in the console, given to the
model as words (name and size, what DingTalk heard, a length), never bytes; a fetch that fails
keeps the label and says why; erased with the buyer, pruned by retention."""

from __future__ import annotations

import io
import struct
import uuid
import zipfile
from zoneinfo import ZoneInfo

import pytest
from starlette.testclient import TestClient

from config import DingTalkSettings, RetentionSettings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.batches import evaluate
from runtime.admission.routes import RouteSpec, create_route
from runtime.agent.rendering import byte_size, content_text
from runtime.agent.turn import run_turn
from runtime.customers.erasure import erase_customer
from runtime.customers.retention import prune
from runtime.customers.transcript import transcript, transcript_version
from runtime.inbound.ingest import ingest_page
from runtime.inbound.media import (
    MAX_ATTEMPTS,
    buyer_media,
    expire_media,
    fetch_media,
    media_body,
    pending_media,
    servable,
    sniff_media,
)
from runtime.operators.accounts import Role, add_operator
from runtime.outbox.manual import ManualSend, send_manual
from runtime.outbox.requests import begin_attempt, record_sent
from runtime.store import now_ms
from tests.fakes.dingtalk import FakeDingTalk
from tests.unit.test_inbound_images import Recorder
from transports.dingtalk import DingTalkCredentials
from transports.dingtalk.robot import parse_robot_message, robot_page
from transports.dingtalk.transport import DingTalkTransport
from worker.console.media import attachment, byte_range

MAX = 64 * 1024  # KEFU_MEDIA_MAX_BYTES of these tests
VIDEO_MAX = 256 * 1024  # KEFU_MEDIA_VIDEO_MAX_BYTES of these tests
DAY_MS = 86_400_000
ZONE = ZoneInfo("Asia/Shanghai")

PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n" + b" " * 2000
AMR = b"#!AMR\n" + b"\x3c\x48\xf5\x1f\x96\x66\x79\xe1\xe0\x01\xe7\xcf\xf0\x00\x00\x00\x80" * 40
DOCX_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX_MIME = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
MP4 = struct.pack(">I", 24) + b"ftypmp42" + b"\x00\x00\x00\x00mp42isom" + struct.pack(">I", 8) + b"mdat" + b"\x00" * 900


def zipped(*members: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for member in members:
            archive.writestr(member, "<x/>")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("data", "mime"),
    [
        (AMR, "audio/amr"),
        (b"ID3\x04\x00\x00\x00\x00\x00\x00" + b"\x00" * 20, "audio/mpeg"),
        (b"\xff\xfb\x90\x64" + b"\x00" * 20, "audio/mpeg"),  # an MPEG layer III frame, no tag
        (b"\xff\xf1\x50\x80" + b"\x00" * 20, "audio/aac"),  # ADTS
        (struct.pack(">I", 20) + b"ftypM4A \x00\x00\x00\x00M4A mp42", "audio/mp4"),
        (b"OggS\x00\x02" + b"\x00" * 30, "audio/ogg"),
        (b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\x00" * 20, "audio/wav"),
        (b"\x02#!SILK_V3" + b"\x00" * 10, "audio/silk"),
        (MP4, "video/mp4"),
        (struct.pack(">I", 20) + b"ftypqt  \x00\x00\x02\x00qt  ", "video/quicktime"),
        (struct.pack(">I", 20) + b"ftyp3gp4\x00\x00\x00\x00isom3gp4", "video/3gpp"),
        (b"\x1aE\xdf\xa3\x9fB\x86\x81\x01" + b"\x00" * 20, "video/webm"),
        (PDF, "application/pdf"),
        (zipped("[Content_Types].xml", "word/document.xml"), DOCX_MIME),
        (zipped("[Content_Types].xml", "xl/workbook.xml"), XLSX_MIME),
        (zipped("readme.txt"), "application/zip"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 20, "image/png"),
    ],
)
def test_the_bytes_say_what_a_buyers_file_is(data, mime):
    assert sniff_media(data)[0] == mime
    assert servable(mime) == mime  # every type sniffed is one a copy may be served as


@pytest.mark.parametrize(
    "data",
    [b"<!DOCTYPE html><script>alert(1)</script>", b'<svg xmlns="http://www.w3.org/2000/svg"/>', b"hello", b""],
)
def test_markup_and_text_are_no_known_type_and_are_only_ever_served_as_octet_stream(data):
    assert sniff_media(data) is None
    assert servable("text/html") == servable("image/svg+xml") == servable(None) == "application/octet-stream"


# -- DingTalk, the store, the model and the console ----------------------------------------


@pytest.fixture
def ding(store, fake_dingtalk: FakeDingTalk) -> DingTalkTransport:
    """Account `ding` (a direct route), and its transport against the fake DingTalk."""
    create_account(store, AccountSpec(id="ding", platform="dingtalk", identity=fake_dingtalk.robot_code))
    create_route(store, RouteSpec(id="ding-direct", account_id="ding", conversation_type="direct"), op_id="op-dd")
    credentials = DingTalkCredentials(
        client_id=fake_dingtalk.client_id,
        client_secret=fake_dingtalk.client_secret,
        robot_code=fake_dingtalk.robot_code,
    )
    settings = DingTalkSettings(openapi_url=fake_dingtalk.url, oapi_url=fake_dingtalk.url, timeout_s=5)
    transport = DingTalkTransport(settings, lambda _: credentials)
    yield transport
    transport.close()


def robot_message(fake: FakeDingTalk, msgtype: str, content: dict, data: bytes | None) -> dict:
    """A 1:1 robot message of staff-1 (DingTalk takes files, voice and video in 1:1 chats only)
    whose bytes the fake hands out under a fresh download code (none: a code that expired)."""
    code = f"code-{uuid.uuid4().hex[:12]}"
    if data is not None:
        fake.files[code] = data
    return {
        "conversationId": "cid-staff-1",
        "conversationType": "1",
        "msgId": f"msg-{uuid.uuid4().hex[:12]}",
        "msgtype": msgtype,
        "content": {"downloadCode": code, **content},
        "createAt": now_ms(),
        "senderStaffId": "staff-1",
        "senderNick": "张三",
        "robotCode": fake.robot_code,
    }


def receive(store, message: dict) -> tuple[int, int]:
    """Ingest the message's page: (its stored message id, the customer)."""
    result = ingest_page(store, robot_page("ding", parse_robot_message(message)))
    [message_id] = result.media  # what ingest hands on to be fetched
    return message_id, result.customer_ids[0]


def file_message(fake, data, name="报价单.pdf"):
    return robot_message(fake, "file", {"fileName": name, "spaceId": "1", "fileId": "f1"}, data)


def voice_message(fake, data):
    return robot_message(fake, "audio", {"duration": 3200, "recognition": "我要退货"}, data)


def video_message(fake, data, seconds="12"):
    return robot_message(fake, "video", {"duration": seconds, "videoType": "mp4"}, data)


def fetch(store, transport, message_id):
    return fetch_media(store, lambda _: transport, message_id, MAX, VIDEO_MAX)


def body_of(store, message_id):
    with store.read() as conn:
        return media_body(conn.execute("SELECT body FROM inbound_message WHERE id = :m", {"m": message_id}).scalar())


def copies(store) -> dict[str, tuple[str, str, bytes]]:
    with store.read() as conn:
        return {r[0]: (r[1], r[2], bytes(r[3])) for r in conn.execute("SELECT sha256, kind, mime, data FROM media")}


def sign_in(client: TestClient, name: str = "victor", password: str = "viewer-pass-1") -> None:
    token = client.get("/login").text.split('name="csrf" value="')[1].split('"')[0]
    client.post("/login", data={"csrf": token, "name": name, "password": password})


def test_a_file_a_voice_message_and_a_video_are_fetched_told_by_their_bytes_and_stored(
    store, settings, fake_dingtalk, ding
):
    file_id, customer = receive(store, file_message(fake_dingtalk, PDF))
    voice_id, _ = receive(store, voice_message(fake_dingtalk, AMR))
    video_id, _ = receive(store, video_message(fake_dingtalk, MP4))
    assert [body_of(store, m).state for m in (file_id, voice_id, video_id)] == ["pending"] * 3
    with store.read() as conn:
        assert pending_media(conn, 10, now_ms() + 1, now_ms()) == [file_id, voice_id, video_id]

    bodies = [fetch(store, ding, m) for m in (file_id, voice_id, video_id)]
    assert [(b.state, b.mime, b.size) for b in bodies] == [
        ("stored", "application/pdf", len(PDF)),
        ("stored", "audio/amr", len(AMR)),
        ("stored", "video/mp4", len(MP4)),
    ]
    assert len(fake_dingtalk.downloads) == 3  # each by its own download code, once
    assert fetch(store, ding, file_id) == bodies[0] and len(fake_dingtalk.downloads) == 3  # final: not again
    stored = copies(store)
    assert {sha: (mime, data) for sha, (_, mime, data) in stored.items()} == {
        bodies[0].sha256: ("application/pdf", PDF),
        bodies[1].sha256: ("audio/amr", AMR),
        bodies[2].sha256: ("video/mp4", MP4),
    }
    # What the model reads, and what operators read and open.
    with store.read() as conn:
        rows = conn.execute("SELECT content_type, body FROM inbound_message ORDER BY id").all()
    assert [content_text(*row) for row in rows] == ["[file 报价单.pdf, 2 KB]", "[voice 3 s] 我要退货", "[video 12 s]"]
    lines = [line for line in transcript(store, customer).lines if line.speaker == "buyer"]
    assert [(line.text, line.media.kind, line.media.mime) for line in lines] == [
        ("[file 报价单.pdf, 2 KB]", "file", "application/pdf"),
        ("[voice 3 s] 我要退货", "voice", "audio/amr"),
        ("[video 12 s]", "video", "video/mp4"),
    ]
    copy = buyer_media(store, customer, bodies[1].sha256)
    assert (copy.kind, copy.mime, copy.name, copy.size) == ("voice", "audio/amr", f"voice-{voice_id}.amr", len(AMR))
    assert buyer_media(store, customer + 1, bodies[0].sha256) is None  # only within its own conversation


def test_the_model_reads_names_sizes_recognition_and_lengths_never_bytes(store, settings, fake_dingtalk, ding):
    file_id, customer = receive(store, file_message(fake_dingtalk, PDF))
    voice_id, _ = receive(store, voice_message(fake_dingtalk, AMR))
    video_id, _ = receive(store, video_message(fake_dingtalk, MP4, seconds="75"))
    for message_id in (file_id, voice_id, video_id):
        fetch(store, ding, message_id)
    model = Recorder()
    evaluate(store, customer, 1000)
    run_turn(store, model, customer, settings.sessions_dir, ZONE, settings.agent)
    [view] = model.views
    said = view[-1].content
    assert "[counterpart 张三] [file 报价单.pdf, 2 KB]" in said
    assert "[counterpart 张三] [voice 3 s] 我要退货" in said
    assert "[counterpart 张三] [video 75 s]" in said
    assert not any(message.images for message in view)  # nothing of the copies reaches the model
    for copy in copies(store):
        assert copy not in "".join(str(message.content) for message in view)


def test_too_big_is_refused_by_its_declared_length_and_a_video_has_a_larger_limit(store, fake_dingtalk, ding):
    big = PDF + b"\x00" * (3 * MAX)  # over KEFU_MEDIA_MAX_BYTES, under KEFU_MEDIA_VIDEO_MAX_BYTES
    long_voice, huge = AMR + b"\x00" * (3 * MAX), MP4 + b"\x00" * (2 * VIDEO_MAX)
    file_id, customer = receive(store, file_message(fake_dingtalk, big, name="大合同.pdf"))
    voice_id, _ = receive(store, voice_message(fake_dingtalk, long_voice))
    clip_id, _ = receive(store, video_message(fake_dingtalk, MP4 + b"\x00" * (3 * MAX)))
    huge_id, _ = receive(store, video_message(fake_dingtalk, huge))
    refused = fetch(store, ding, file_id)
    # Refused by the length the download declared, before reading it: had it been read, the
    # streamed limit would have stopped it a chunk past MAX, and said that much.
    assert (refused.state, refused.code, refused.size) == ("refused", "KEFU_MEDIA_TOO_LARGE", len(big))
    assert fetch(store, ding, voice_id).code == "KEFU_MEDIA_TOO_LARGE"
    assert fetch(store, ding, clip_id).state == "stored"  # a video's own limit
    too_long = fetch(store, ding, huge_id)
    assert (too_long.state, too_long.size) == ("refused", len(huge))
    assert [mime for _, mime, _ in copies(store).values()] == ["video/mp4"]
    texts = [line.text for line in transcript(store, customer).lines if line.speaker == "buyer"]
    assert texts == [
        f"[file 大合同.pdf, {byte_size(len(big))}, refused: KEFU_MEDIA_TOO_LARGE]",  # the label stays, with why
        f"[voice 3 s, {byte_size(len(long_voice))}, refused: KEFU_MEDIA_TOO_LARGE] 我要退货",
        "[video 12 s]",
        f"[video 12 s, {byte_size(len(huge))}, refused: KEFU_MEDIA_TOO_LARGE]",
    ]


def test_an_expired_code_or_a_platform_out_of_reach_keeps_the_label_and_says_why(store, settings, fake_dingtalk, ding):
    expired_id, customer = receive(store, file_message(fake_dingtalk, None))  # DingTalk no longer knows the code
    failed = fetch(store, ding, expired_id)
    assert (failed.state, failed.code) == ("failed", "DINGTALK_invalidParameter.downloadCode")  # final at once
    voice_id, _ = receive(store, voice_message(fake_dingtalk, AMR))
    unreachable = DingTalkTransport(
        DingTalkSettings(openapi_url="http://127.0.0.1:9", oapi_url="http://127.0.0.1:9", timeout_s=1),
        lambda _: DingTalkCredentials(client_id="a", client_secret="b", robot_code="c"),
    )
    tries = [fetch(store, unreachable, voice_id) for _ in range(MAX_ATTEMPTS)]
    assert [t.state for t in tries] == ["pending"] * (MAX_ATTEMPTS - 1) + ["failed"]
    assert tries[-1].code.startswith("DINGTALK_UNREACHABLE")  # a safe code: no URL, no body
    with store.read() as conn:
        rows = conn.execute("SELECT content_type, body FROM inbound_message ORDER BY id").all()
    assert [content_text(*row) for row in rows] == ["[file 报价单.pdf]", "[voice 3 s] 我要退货"]  # the model's
    texts = [line.text for line in transcript(store, customer).lines if line.speaker == "buyer"]
    assert texts == [
        "[file 报价单.pdf, failed: DINGTALK_invalidParameter.downloadCode]",
        f"[voice 3 s, failed: {tries[-1].code}] 我要退货",
    ]


def test_a_voice_message_with_nothing_to_fetch_reads_as_what_dingtalk_heard(store, fake_dingtalk, ding):
    message = voice_message(fake_dingtalk, None)
    del message["content"]["downloadCode"]
    result = ingest_page(store, robot_page("ding", parse_robot_message(message)))
    assert result.media == []  # nothing to fetch
    [line] = [line for line in transcript(store, result.customer_ids[0]).lines if line.speaker == "buyer"]
    assert (line.text, line.media) == ("[voice 3 s] 我要退货", None)


def test_copies_go_with_an_erased_buyer(store, settings, fake_dingtalk, ding):
    ids = [receive(store, m(fake_dingtalk, d)) for m, d in ((file_message, PDF), (voice_message, AMR))]
    ids.append(receive(store, video_message(fake_dingtalk, MP4)))
    for message_id, _ in ids:
        fetch(store, ding, message_id)
    customer = ids[0][1]
    kept = list(copies(store))
    report = erase_customer(store, None, settings.sessions_dir, None, customer, "tester")
    assert report.counts.media == 3 and copies(store) == {}
    assert all(buyer_media(store, customer, sha256) is None for sha256 in kept)


def test_retention_prunes_old_copies_and_the_transcript_says_they_are_no_longer_kept(
    store, settings, fake_dingtalk, ding
):
    file_id, customer = receive(store, file_message(fake_dingtalk, PDF))
    video_id, _ = receive(store, video_message(fake_dingtalk, MP4))
    for message_id in (file_id, video_id):
        fetch(store, ding, message_id)
    sha256 = body_of(store, file_id).sha256
    policy = RetentionSettings(media_days=30)
    assert prune(store, settings.sessions_dir, policy, now=now_ms() + 29 * DAY_MS).media == 0  # not old enough
    assert prune(store, settings.sessions_dir, policy, now=now_ms() + 31 * DAY_MS).media == 2
    assert copies(store) == {} and buyer_media(store, customer, sha256) is None
    lines = [line for line in transcript(store, customer).lines if line.speaker == "buyer"]
    assert [(line.text, line.media) for line in lines] == [
        ("[file 报价单.pdf, 2 KB, no longer kept]", None),
        ("[video 12 s, no longer kept]", None),
    ]


def mirror_of(store) -> tuple[str, str]:
    with store.read() as conn:
        row = conn.execute("SELECT content_type, body FROM inbound_message WHERE sender_role = 'human-console'").one()
    return tuple(row)


def test_a_file_the_shop_sent_is_mirrored_by_name_and_never_taken_for_one_to_fetch(
    store, settings, shop, platform, transport, fake_dingtalk, ding
):
    """The console's mirror of a sent file holds its name, not JSON: every media query reads past it."""
    said = platform.buyer_says(shop, "b1", "李四", "发合同给我")
    sim_customer = ingest_page(store, transport.page_of(shop, [said])).customer_ids[0]
    send_manual(store, ManualSend(request_id="doc-1", customer_id=sim_customer, file_name="合同.pdf", file_data=PDF))
    grant = begin_attempt(store, "doc-1", "w", lease_s=60)
    record_sent(store, "doc-1", grant.attempt_no, transport.send(grant.send))
    assert mirror_of(store) == ("file", "合同.pdf")
    file_id, customer = receive(store, file_message(fake_dingtalk, PDF))  # the same bytes from a buyer
    with store.read() as conn:
        assert pending_media(conn, 10, now_ms() + 1, now_ms()) == [file_id]
    assert expire_media(store, now_ms() + 2 * DAY_MS, 10) == 1  # given up, too old to fetch; the mirror untouched
    assert mirror_of(store) == ("file", "合同.pdf")
    transcript_version(store, sim_customer)  # reads its media rows, the mirror among them
    assert [line.text for line in transcript(store, sim_customer).lines][-1] == "[file 合同.pdf]"  # the request's line
    erase_customer(store, None, settings.sessions_dir, None, customer, "tester")
    assert len(copies(store)) == 1  # the shop's own copy of the same bytes stays: its send refers to it
    erase_customer(store, None, settings.sessions_dir, None, sim_customer, "tester")
    assert copies(store) == {}


# -- the console ---------------------------------------------------------------------------


def test_the_console_links_a_file_and_plays_voice_and_video_from_the_store(store, settings, fake_dingtalk, ding):
    from worker.console import create_app
    from worker.context import WorkerRuntime

    docx = zipped("[Content_Types].xml", "word/document.xml")
    ids = [receive(store, file_message(fake_dingtalk, docx, name='报价 "单".docx'))[0]]
    ids.append(receive(store, voice_message(fake_dingtalk, AMR))[0])
    video_id, customer = receive(store, video_message(fake_dingtalk, MP4))
    ids.append(video_id)
    file_copy, voice_copy, video_copy = (fetch(store, ding, m).sha256 for m in ids)
    add_operator(store, "victor", Role.VIEWER, "viewer-pass-1")
    with TestClient(create_app(WorkerRuntime(settings))) as client:
        base = f"/c/{customer}/media"
        signed_out = client.get(f"{base}/{file_copy}", follow_redirects=False)
        assert (signed_out.status_code, signed_out.headers["location"]) == (303, "/login")
        sign_in(client)
        page = client.get(f"/c/{customer}").text
        assert f'<a class="download" href="{base}/{file_copy}" download>download</a>' in page
        assert f'<audio controls preload="none" src="{base}/{voice_copy}"></audio>' in page
        assert f'<video controls preload="metadata" src="{base}/{video_copy}"></video>' in page

        got = client.get(f"{base}/{file_copy}")
        assert got.status_code == 200 and got.content == docx
        assert got.headers["content-type"] == DOCX_MIME
        assert got.headers["content-disposition"] == attachment('报价 "单".docx')
        assert got.headers["content-disposition"].startswith('attachment; filename="__ ___.docx"; filename*=UTF-8')
        assert got.headers["x-content-type-options"] == "nosniff"
        assert "sandbox" in got.headers["content-security-policy"]

        voice = client.get(f"{base}/{voice_copy}")
        assert (voice.content, voice.headers["content-type"]) == (AMR, "audio/amr")
        assert voice.headers["content-disposition"].startswith("attachment;")  # played by <audio> all the same
        part = client.get(f"{base}/{video_copy}", headers={"Range": "bytes=8-15"})
        assert part.status_code == 206 and part.content == MP4[8:16]
        assert part.headers["content-range"] == f"bytes 8-15/{len(MP4)}"
        tail = client.get(f"{base}/{video_copy}", headers={"Range": "bytes=-4"})
        assert tail.content == MP4[-4:]
        past = client.get(f"{base}/{video_copy}", headers={"Range": f"bytes={len(MP4)}-"})
        assert past.status_code == 416 and past.headers["content-range"] == f"bytes */{len(MP4)}"

        assert client.get(f"/c/{customer + 1}/media/{file_copy}").status_code == 404  # another conversation's
        assert client.get(f"{base}/{'0' * 64}").status_code == 404
        assert client.get(f"{base}/..%2F..%2Fetc").status_code == 404
        erase_customer(store, None, settings.sessions_dir, None, customer, "tester")
        assert client.get(f"{base}/{voice_copy}").status_code == 404  # gone with the buyer


@pytest.mark.parametrize(
    ("header", "span"),
    [
        (None, None),
        ("bytes=0-", (0, 99)),
        ("bytes=10-19", (10, 19)),
        ("bytes=90-500", (90, 99)),
        ("bytes=-10", (90, 99)),
        ("bytes=-500", (0, 99)),
        ("bytes=100-", "unsatisfiable"),
        ("bytes=20-10", None),
        ("bytes=0-1,5-6", None),  # several ranges: sent whole
        ("items=0-1", None),
        ("bytes=-", None),
    ],
)
def test_a_players_range_is_served_as_asked_or_whole(header, span):
    assert byte_range(header, 100) == span
