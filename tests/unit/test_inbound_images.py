"""A buyer's image: fetched from the platform into the store (checked as an image, within the
size limit), shown to a vision model as image content for the last N turns, `[image]` to any
other model and once it aged out; an erasure takes the copy with it."""

from __future__ import annotations

import struct
import zlib
from zoneinfo import ZoneInfo

from runtime.admission import evaluate
from runtime.agent.turn import run_turn
from runtime.erasure import erase_customer
from runtime.inbound_media import fetch_image, image_body
from runtime.ingest import ingest_page
from runtime.ports import AssistantReply, ChatMessage, ToolSpec
from runtime.store.sql import sql
from runtime.transcript import transcript
from transports.simulator.platform import BuyerMedia

ZONE = ZoneInfo("Asia/Shanghai")
MAX = 10 * 1024 * 1024


def png(width: int = 2, filler: bytes = b"") -> bytes:
    """A real PNG (optionally padded with an ancillary chunk to a given size)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(width))
    header = struct.pack(">IIBBBBB", width, width, 8, 2, 0, 0, 0)
    extra = chunk(b"teXt", filler) if filler else b""
    body = chunk(b"IHDR", header) + extra + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + body


class Recorder:
    """A model that answers in text and keeps every view it was shown."""

    name = "recorder"

    def __init__(self) -> None:
        self.views: list[list[ChatMessage]] = []

    def complete(self, messages: list[ChatMessage], tools: list[ToolSpec]) -> AssistantReply:
        self.views.append(messages)
        return AssistantReply(text="好的")


def send(store, transport, platform, text="", media=None):
    message = platform.buyer_says("shop", "b1", "张三", text, media=media)
    return ingest_page(store, transport.page_of("shop", [message]))


def turn(store, settings, customer, model, vision=True, rounds=1):
    agent = settings.agent.model_copy(
        update={"image_rounds": rounds, "openai": settings.agent.openai.model_copy(update={"vision": vision})}
    )
    evaluate(store, customer, 1000)
    fetch = lambda ids: [fetch_image(store, lambda _: transport_of(store), m, MAX) for m in ids]  # noqa: E731
    return run_turn(store, model, customer, settings.sessions_dir, ZONE, agent, fetch_images=fetch)


_TRANSPORTS = {}


def transport_of(store):
    return _TRANSPORTS[id(store)]


def images_seen(model: Recorder) -> list[list[bytes]]:
    return [[image.data for m in view for image in m.images] for view in model.views]


def test_an_image_reaches_a_vision_model_then_ages_out(store, settings, shop, transport, platform):
    _TRANSPORTS[id(store)] = transport
    picture = png()
    ingested = send(store, transport, platform, media=BuyerMedia(kind="image", name="photo.png", data=picture))
    [image_id], [customer] = ingested.images, ingested.customer_ids
    model = Recorder()
    turn(store, settings, customer, model)  # the turn fetches it: nothing did before
    assert images_seen(model) == [[picture]]
    with store.read() as conn:
        body = image_body(conn.execute(sql("SELECT body FROM inbound_message WHERE id = :m"), {"m": image_id}).scalar())
        assert body.state == "stored" and body.mime == "image/png" and body.size == len(picture)
        assert conn.execute(sql("SELECT data FROM media WHERE sha256 = :s"), {"s": body.sha256}).scalar() == picture
    [line] = [line for line in transcript(store, customer).lines if line.speaker == "buyer"]
    assert (line.text, line.image) == (f"[image image/png, {len(picture)} B]", body.sha256)  # what operators see
    for text in ("这个有货吗", "什么时候发"):
        send(store, transport, platform, text)
        turn(store, settings, customer, model)
    assert images_seen(model)[1:] == [[], []]  # one round later the image reads [image] again
    assert "[image]" in "".join(m.content for m in model.views[-1])
    other = Recorder()
    send(store, transport, platform, media=BuyerMedia(kind="image", name="b.png", data=png(3)))
    turn(store, settings, customer, other, vision=False)
    assert images_seen(other) == [[]]  # a model without vision never gets image content

    erase_customer(store, None, settings.sessions_dir, None, customer, "tester")
    with store.read() as conn:
        assert conn.execute(sql("SELECT count(*) FROM media")).scalar() == 0  # the copies went with the buyer


def test_an_image_over_the_limit_or_not_an_image_is_refused_and_reads_image(store, settings, shop, transport, platform):
    _TRANSPORTS[id(store)] = transport
    big = png(filler=b"\x00" * (11 * 1024 * 1024))  # 11 MiB
    too_big = send(store, transport, platform, media=BuyerMedia(kind="image", name="big.png", data=big))
    fake = send(store, transport, platform, media=BuyerMedia(kind="image", name="x.png", data=b"MZ not a picture"))
    refused = fetch_image(store, lambda _: transport, too_big.images[0], MAX)
    assert refused.state == "refused" and refused.code == "KEFU_MEDIA_TOO_LARGE" and refused.size == len(big)
    not_image = fetch_image(store, lambda _: transport, fake.images[0], MAX)
    assert not_image.state == "refused" and not_image.code == "KEFU_MEDIA_NOT_AN_IMAGE"
    assert fetch_image(store, lambda _: transport, too_big.images[0], MAX) == refused  # final: not fetched again
    with store.read() as conn:
        assert conn.execute(sql("SELECT count(*) FROM media")).scalar() == 0
    model = Recorder()
    turn(store, settings, too_big.customer_ids[0], model)
    assert images_seen(model) == [[]] and model.views[0][-1].content.count("[image]") == 2


def test_a_platform_that_cannot_hand_out_media_fails_the_fetch_after_a_few_tries(store, shop, transport, platform):
    class Broken:
        def fetch_media(self, account_id: str, ref: str, max_bytes: int) -> bytes:
            from runtime.ports import MediaFetchFailure

            raise MediaFetchFailure("PLATFORM_BUSY", transient=True)

    [image] = send(store, transport, platform, media=BuyerMedia(kind="image", name="a.png", data=png())).images
    states = [fetch_image(store, lambda _: Broken(), image, MAX) for _ in range(3)]
    assert [(s.state, s.attempts) for s in states] == [("pending", 1), ("pending", 2), ("failed", 2)]
    assert states[-1].code == "PLATFORM_BUSY"
    unsupported = send(store, transport, platform, media=BuyerMedia(kind="image", name="b.png", data=png())).images[0]
    assert fetch_image(store, lambda _: object(), unsupported, MAX).code == "KEFU_MEDIA_FETCH_UNSUPPORTED"


def test_an_image_whose_buyer_is_erased_mid_download_leaves_nothing(store, settings, shop, transport, platform):
    ingested = send(store, transport, platform, media=BuyerMedia(kind="image", name="a.png", data=png()))

    class ErasedMeanwhile:
        def fetch_media(self, account_id: str, ref: str, max_bytes: int) -> bytes:
            erase_customer(store, None, settings.sessions_dir, None, ingested.customer_ids[0], "tester")
            return png()

    assert fetch_image(store, lambda _: ErasedMeanwhile(), ingested.images[0], MAX) is None
    with store.read() as conn:
        assert conn.execute(sql("SELECT count(*) FROM media")).scalar() == 0
