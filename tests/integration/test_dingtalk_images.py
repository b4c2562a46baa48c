"""A buyer's picture on DingTalk reaches a vision model: a real worker (`--listen`, Redis) takes
the robot message from the fake DingTalk's Stream gateway, fetches the picture by its download
code through the OpenAPI, and the fake OpenAI server receives it as image content; one round
later it reads `[image]` again; a picture over the size limit is refused and still answered."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest

from runtime.inbound.media import media_body
from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.openai_server import FakeOpenAI, images_of, text_of
from tests.integration.helpers import wait_for, worker_env
from worker.celery_app import make_app
from worker.process import WorkerProcess

pytestmark = pytest.mark.parametrize("broker_url", ["redis"], indirect=True)

PICTURE = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4//8/AwAI/AL+hc2rNAAAAABJRU5ErkJggg=="
)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def worker(settings, fake_dingtalk, ding, fake) -> Iterator[WorkerProcess]:
    env = worker_env(
        settings,
        KEFU_AGENT__PROVIDER="openai",
        KEFU_AGENT__OPENAI__BASE_URL=fake.base_url,
        KEFU_AGENT__OPENAI__API_KEY="sk-test",
        KEFU_AGENT__OPENAI__MODEL="fake-vision",
        KEFU_AGENT__OPENAI__VISION="true",
        KEFU_AGENT__IMAGE_ROUNDS="1",
        KEFU_MEDIA_MAX_BYTES=str(1024 * 1024),
        KEFU_LISTENER__RECONNECT_INITIAL_MS="100",
        KEFU_DINGTALK__OPENAPI_URL=fake_dingtalk.url,
        KEFU_DINGTALK__OAPI_URL=fake_dingtalk.url,
        KEFU_DINGTALK__TIMEOUT_S="2",
    )
    process = WorkerProcess(env, settings.data_dir / "worker.log", listen=True).start()
    process.wait_ready(make_app(settings))
    log = settings.data_dir / "worker.log"
    wait_for(lambda: fake_dingtalk.connected, 20, "the listener to connect", lambda: log.read_text())
    yield process
    process.stop()


def turns(fake: FakeOpenAI) -> list[dict]:
    """The model requests of buyer turns (the startup probe and closing calls left out)."""
    return [r for r in fake.requests if r.get("tools") and r["messages"][-1]["role"] == "user"]


def test_a_picture_reaches_the_model_as_an_image_then_ages_out(fake_dingtalk: FakeDingTalk, worker, fake, store):
    assert images_of(fake.requests[0]["messages"][0])  # the startup probe: the model takes images
    fake_dingtalk.buyer_sends_picture("staff-1", PICTURE)
    wait_for(lambda: len(turns(fake)) == 1 and len(fake_dingtalk.sends) == 1, 30, "the picture's turn and reply")
    [shown] = images_of(turns(fake)[0]["messages"][-1])
    assert shown == "data:image/png;base64," + base64.b64encode(PICTURE).decode()
    assert len(fake_dingtalk.downloads) == 1  # fetched once, by its download code

    fake_dingtalk.buyer_says("staff-1", "这个颜色有货吗")
    wait_for(lambda: len(turns(fake)) == 2 and len(fake_dingtalk.sends) == 2, 30, "the next turn and reply")
    later = turns(fake)[1]["messages"]
    assert not any(images_of(m) for m in later)  # a round later: no image content
    assert any("[image]" in text_of(m) for m in later if m["role"] == "user")

    big = PICTURE + b"\x00" * (1024 * 1024)  # over KEFU_MEDIA_MAX_BYTES
    fake_dingtalk.buyer_sends_picture("staff-1", big)
    wait_for(lambda: len(turns(fake)) == 3 and len(fake_dingtalk.sends) == 3, 30, "the big picture's turn and reply")
    assert not any(images_of(m) for m in turns(fake)[2]["messages"])
    with store.read() as conn:
        bodies = [
            media_body(b)
            for (b,) in conn.execute("SELECT body FROM inbound_message WHERE content_type = 'image' ORDER BY id")
        ]
    assert [(b.state, b.code) for b in bodies] == [("stored", None), ("refused", "KEFU_MEDIA_TOO_LARGE")]
