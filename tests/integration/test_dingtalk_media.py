"""A buyer's file, voice message and video on DingTalk, end to end: a real worker (`--listen`,
Redis) takes the robot messages from the fake DingTalk's Stream gateway, fetches each by its
download code through the robot file API, stores what the bytes are, and the model (the fake
OpenAI server) reads them as words, never bytes; a video over its limit is refused unread and
still answered; an operator downloads the file and plays the voice message and the video from the
console served by uvicorn, over plain HTTP."""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from selenium.webdriver.support.ui import WebDriverWait

from runtime.inbound.media import media_body
from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.openai_server import FakeOpenAI, text_of
from tests.integration.conftest import http_sign_in, sign_in
from tests.integration.helpers import wait_for, worker_env
from worker.celery_app import make_app
from worker.process import WorkerProcess

pytestmark = pytest.mark.parametrize("broker_url", ["redis"], indirect=True)

MAX, VIDEO_MAX = 32 * 1024, 64 * 1024
PDF = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n" * 20
AMR = b"#!AMR\n" + b"\x3c\x48\xf5\x1f\x96\x66\x79\xe1\xe0\x01\xe7\xcf\xf0\x00\x00\x00\x80" * 50
RATE = 8000
SILENCE = b"\x00\x00" * RATE  # a second of 16-bit mono PCM: a WAV every browser plays
FORMAT = struct.pack("<IHHIIHH", 16, 1, 1, RATE, RATE * 2, 2, 16)  # PCM, mono, 16 bits
WAV = (
    b"RIFF" + struct.pack("<I", 36 + len(SILENCE)) + b"WAVEfmt " + FORMAT
    + b"data" + struct.pack("<I", len(SILENCE)) + SILENCE
)  # fmt: skip
MP4 = struct.pack(">I", 24) + b"ftypisom\x00\x00\x02\x00isomiso2" + struct.pack(">I", 1008) + b"mdat" + b"\x01" * 1000


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def listening(settings, fake_dingtalk, ding, model) -> Iterator[WorkerProcess]:
    """The worker, listening to the fake DingTalk (named so the console fixture does not take it
    for a Celery app it could hand work to)."""
    env = worker_env(
        settings,
        KEFU_AGENT__PROVIDER="openai",
        KEFU_AGENT__OPENAI__BASE_URL=model.base_url,
        KEFU_AGENT__OPENAI__API_KEY="sk-test",
        KEFU_AGENT__OPENAI__MODEL="fake-text",
        KEFU_MEDIA_MAX_BYTES=str(MAX),
        KEFU_MEDIA_VIDEO_MAX_BYTES=str(VIDEO_MAX),
        KEFU_LISTENER__RECONNECT_INITIAL_MS="100",
        KEFU_DINGTALK__OPENAPI_URL=fake_dingtalk.url,
        KEFU_DINGTALK__OAPI_URL=fake_dingtalk.url,
        KEFU_DINGTALK__TIMEOUT_S="2",
    )
    log = settings.data_dir / "worker.log"
    process = WorkerProcess(env, log, listen=True).start()
    process.wait_ready(make_app(settings))
    wait_for(lambda: fake_dingtalk.connected, 20, "the listener to connect", lambda: log.read_text())
    yield process
    process.stop()


def push(fake: FakeDingTalk, msgtype: str, content: dict, data: bytes) -> None:
    """A 1:1 robot message of staff-1 whose bytes the fake hands out by a fresh download code."""
    code = f"code-{uuid.uuid4().hex[:12]}"
    fake.files[code] = data
    fake.push(
        {
            "conversationId": "cid-staff-1",
            "conversationType": "1",
            "msgId": f"msg-{uuid.uuid4().hex[:12]}",
            "msgtype": msgtype,
            "content": {"downloadCode": code, **content},
            "createAt": int(time.time() * 1000),
            "senderStaffId": "staff-1",
            "senderNick": "张三",
            "robotCode": fake.robot_code,
        }
    )


def media_rows(store) -> list[tuple[int, int, str, object]]:
    with store.read() as conn:
        rows = conn.execute(
            "SELECT id, customer_id, content_type, body FROM inbound_message"
            " WHERE content_type IN ('file', 'voice', 'video') ORDER BY id"
        ).all()
    return [(r[0], r[1], r[2], media_body(r[3])) for r in rows]


def settled(store, count: int) -> bool:
    rows = media_rows(store)
    return len(rows) == count and all(body.state != "pending" for *_, body in rows)


def said_to_model(model: FakeOpenAI) -> str:
    return "\n".join(text_of(m) for r in model.requests for m in r["messages"] if m["role"] == "user")


def test_files_voice_and_video_are_fetched_shown_to_operators_and_read_to_the_model_as_words(
    fake_dingtalk: FakeDingTalk, listening, model, store, console
):
    push(fake_dingtalk, "file", {"fileName": "报价单.pdf", "spaceId": "1"}, PDF)
    push(fake_dingtalk, "audio", {"duration": 3200, "recognition": "我要退货"}, AMR)
    push(fake_dingtalk, "video", {"duration": "12", "videoType": "mp4"}, MP4)
    push(fake_dingtalk, "video", {"duration": "40", "videoType": "mp4"}, MP4 + b"\x00" * VIDEO_MAX)  # too long
    wait_for(lambda: settled(store, 4), 30, "each message's fetch")
    rows = media_rows(store)
    assert [(kind, body.state, body.mime, body.code) for _, _, kind, body in rows] == [
        ("file", "stored", "application/pdf", None),
        ("voice", "stored", "audio/amr", None),
        ("video", "stored", "video/mp4", None),
        ("video", "refused", None, "KEFU_MEDIA_TOO_LARGE"),
    ]
    assert rows[3][3].size == len(MP4) + VIDEO_MAX  # refused by its declared length, never read
    assert len(fake_dingtalk.downloads) == 4
    with store.read() as conn:
        kept = {r[0]: bytes(r[1]) for r in conn.execute("SELECT sha256, data FROM media")}
    assert kept == {rows[0][3].sha256: PDF, rows[1][3].sha256: AMR, rows[2][3].sha256: MP4}

    # Every message answered, the refused one too; the model read words, never the bytes.
    wait_for(lambda: "[video 40 s]" in said_to_model(model) and len(fake_dingtalk.sends) >= 1, 30, "the replies")
    said = said_to_model(model)
    assert "[file 报价单.pdf" in said and "[voice 3 s] 我要退货" in said and "[video 12 s]" in said
    assert "%PDF" not in said and "#!AMR" not in said and not any(sha in said for sha in kept)

    customer = rows[0][1]
    with httpx.Client(base_url=console, follow_redirects=True, timeout=10) as client:
        http_sign_in(client, "victor")  # a viewer
        page = client.get(f"/c/{customer}").text
        base = f"/c/{customer}/media"
        file_copy, voice_copy, video_copy = (row[3].sha256 for row in rows[:3])
        assert f'href="{base}/{file_copy}" download' in page
        assert f'<audio controls preload="none" src="{base}/{voice_copy}"></audio>' in page
        assert f'<video controls preload="metadata" src="{base}/{video_copy}"></video>' in page
        assert "[video 40 s, " in page and "refused: KEFU_MEDIA_TOO_LARGE]" in page  # the label, and why
        download = client.get(f"{base}/{file_copy}")
        assert download.content == PDF and download.headers["content-type"] == "application/pdf"
        assert download.headers["content-disposition"].startswith("attachment;")
        assert "UTF-8''%E6%8A%A5%E4%BB%B7%E5%8D%95.pdf" in download.headers["content-disposition"]
        assert client.get(f"{base}/{voice_copy}").content == AMR
        part = client.get(f"{base}/{video_copy}", headers={"Range": "bytes=0-99"})
        assert (part.status_code, part.content) == (206, MP4[:100])
        assert client.get(f"/c/{customer + 1}/media/{file_copy}").status_code == 404


# The page's <audio> loads the voice message's copy under the console's content security policy:
# its metadata (a second, at 8 kHz) and no policy violation. Read in one script: the live view may
# replace the lines at any moment.
_PLAYED = """
if (!window.kefuViolations) {
  window.kefuViolations = [];
  document.addEventListener('securitypolicyviolation', e => window.kefuViolations.push(e.violatedDirective));
}
const audio = document.querySelector('#lines li.buyer audio');
if (!audio) return null;
if (!audio.dataset.asked) {  // this element (the live view may have put in a new one)
  audio.dataset.asked = '1';
  audio.preload = 'metadata';
  audio.load();
}
return [audio.readyState, audio.duration, audio.error && audio.error.code, window.kefuViolations];
"""


def test_a_voice_message_plays_in_the_console_under_its_content_security_policy(
    fake_dingtalk: FakeDingTalk, listening, store, console, browser
):
    push(fake_dingtalk, "audio", {"duration": 1000, "recognition": "在吗"}, WAV)
    wait_for(lambda: settled(store, 1), 30, "the voice message's fetch")
    [(_, customer, _, body)] = media_rows(store)
    assert (body.state, body.mime) == ("stored", "audio/wav")
    sign_in(browser, console, "victor")
    browser.get(f"{console}/c/{customer}")
    loaded = WebDriverWait(browser, 20).until(lambda d: (s := d.execute_script(_PLAYED)) and s[0] >= 1 and s)
    ready, duration, error, violations = loaded
    assert round(duration) == 1 and error is None and violations == []
