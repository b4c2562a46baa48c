"""A buyer's image: fetched from the platform into the store (checked as an image, within the
size limit), shown to a vision model as image content for the last N turns, `[image]` to any
other model and once it aged out; an erasure takes the copy with it."""

from __future__ import annotations

import struct
import zlib
from zoneinfo import ZoneInfo

from runtime import pipeline
from runtime.admission.batches import evaluate
from runtime.agent.turn import run_turn
from runtime.customers.erasure import erase_customer
from runtime.customers.transcript import transcript
from runtime.inbound.ingest import ingest_page
from runtime.inbound.media import buyer_image, fetch_media, media_body, pending_media
from runtime.pipeline import FetchMedia
from runtime.ports import AssistantReply, ChatMessage, MediaFetchFailure, ToolSpec
from runtime.store import now_ms
from tests.local_services import Local
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


# The smallest lossless WebP (1x1), and a 1x1 24-bit BMP.
WEBP = b"RIFF\x1a\x00\x00\x00WEBPVP8L\r\x00\x00\x00/\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00"
BMP = (
    b"BM" + struct.pack("<IHHI", 58, 0, 0, 54)
    + struct.pack("<IiiHHIIiiII", 40, 1, 1, 1, 24, 0, 4, 2835, 2835, 0, 0) + b"\x00\x00\xff\x00"
)  # fmt: skip
DAY_MS = 24 * 3600 * 1000


class Busy:
    """A platform that cannot hand out media right now (a transient failure)."""

    def fetch_media(self, account_id: str, ref: str, max_bytes: int) -> bytes:
        raise MediaFetchFailure("PLATFORM_BUSY", transient=True)


class NeverAsked:
    """A platform that must not be asked."""

    def fetch_media(self, account_id: str, ref: str, max_bytes: int) -> bytes:
        raise AssertionError(f"{ref} was fetched")


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
    fetch = lambda ids: [fetch_media(store, lambda _: transport_of(store), m, MAX) for m in ids]  # noqa: E731
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
    [image_id], [customer] = ingested.media, ingested.customer_ids
    model = Recorder()
    turn(store, settings, customer, model)  # the turn fetches it: nothing did before
    assert images_seen(model) == [[picture]]
    with store.read() as conn:
        body = media_body(conn.execute("SELECT body FROM inbound_message WHERE id = :m", {"m": image_id}).scalar())
        assert body.state == "stored" and body.mime == "image/png" and body.size == len(picture)
        assert conn.execute("SELECT data FROM media WHERE sha256 = :s", {"s": body.sha256}).scalar() == picture
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
        assert conn.execute("SELECT count(*) FROM media").scalar() == 0  # the copies went with the buyer


def test_an_image_over_the_limit_or_not_an_image_is_refused_and_reads_image(store, settings, shop, transport, platform):
    _TRANSPORTS[id(store)] = transport
    big = png(filler=b"\x00" * (11 * 1024 * 1024))  # 11 MiB
    too_big = send(store, transport, platform, media=BuyerMedia(kind="image", name="big.png", data=big))
    fake = send(store, transport, platform, media=BuyerMedia(kind="image", name="x.png", data=b"MZ not a picture"))
    refused = fetch_media(store, lambda _: transport, too_big.media[0], MAX)
    assert refused.state == "refused" and refused.code == "KEFU_MEDIA_TOO_LARGE" and refused.size == len(big)
    not_image = fetch_media(store, lambda _: transport, fake.media[0], MAX)
    assert not_image.state == "refused" and not_image.code == "KEFU_MEDIA_NOT_AN_IMAGE"
    assert fetch_media(store, lambda _: transport, too_big.media[0], MAX) == refused  # final: not fetched again
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM media").scalar() == 0
    model = Recorder()
    turn(store, settings, too_big.customer_ids[0], model)
    assert images_seen(model) == [[]] and model.views[0][-1].content.count("[image]") == 2


def test_a_platform_that_cannot_hand_out_media_fails_the_fetch_after_a_few_tries(store, shop, transport, platform):
    class Broken:
        def fetch_media(self, account_id: str, ref: str, max_bytes: int) -> bytes:
            from runtime.ports import MediaFetchFailure

            raise MediaFetchFailure("PLATFORM_BUSY", transient=True)

    [image] = send(store, transport, platform, media=BuyerMedia(kind="image", name="a.png", data=png())).media
    states = [fetch_media(store, lambda _: Broken(), image, MAX) for _ in range(3)]
    assert [(s.state, s.attempts) for s in states] == [("pending", 1), ("pending", 2), ("failed", 2)]
    assert states[-1].code == "PLATFORM_BUSY"
    unsupported = send(store, transport, platform, media=BuyerMedia(kind="image", name="b.png", data=png())).media[0]
    assert fetch_media(store, lambda _: object(), unsupported, MAX).code == "KEFU_MEDIA_FETCH_UNSUPPORTED"


def test_an_image_whose_buyer_is_erased_mid_download_leaves_nothing(store, settings, shop, transport, platform):
    ingested = send(store, transport, platform, media=BuyerMedia(kind="image", name="a.png", data=png()))

    class ErasedMeanwhile:
        def fetch_media(self, account_id: str, ref: str, max_bytes: int) -> bytes:
            erase_customer(store, None, settings.sessions_dir, None, ingested.customer_ids[0], "tester")
            return png()

    assert fetch_media(store, lambda _: ErasedMeanwhile(), ingested.media[0], MAX) is None
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM media").scalar() == 0


def body_of(store, message_id):
    with store.read() as conn:
        return media_body(conn.execute("SELECT body FROM inbound_message WHERE id = :m", {"m": message_id}).scalar())


def test_a_webp_reaches_a_vision_model_and_a_bmp_is_stored_for_operators_only(
    store, settings, shop, transport, platform
):
    _TRANSPORTS[id(store)] = transport
    webp = send(store, transport, platform, media=BuyerMedia(kind="image", name="a.webp", data=WEBP))
    bmp = send(store, transport, platform, media=BuyerMedia(kind="image", name="b.bmp", data=BMP))
    model = Recorder()
    turn(store, settings, webp.customer_ids[0], model)
    assert images_seen(model) == [[WEBP]]  # the BMP of the same turn is not image content: `[image]`
    assert model.views[0][-1].content.count("[image]") == 2
    stored = {m: body_of(store, m) for m in (webp.media[0], bmp.media[0])}
    assert [(b.state, b.mime) for b in stored.values()] == [("stored", "image/webp"), ("stored", "image/bmp")]
    bmp_body = stored[bmp.media[0]]
    assert buyer_image(store, bmp.customer_ids[0], bmp_body.sha256) == ("image/bmp", BMP)  # operators see it


def test_the_reconciler_backs_off_a_failing_image_and_expires_one_too_old_to_fetch(
    store, settings, shop, transport, platform
):
    quick = settings.model_copy(update={"reconcile": settings.reconcile.model_copy(update={"grace_s": 0})})
    services = Local(quick, store)
    [failing] = send(store, transport, platform, media=BuyerMedia(kind="image", name="a.png", data=png())).media
    [old] = send(store, transport, platform, media=BuyerMedia(kind="image", name="b.png", data=png())).media
    [older] = send(store, transport, platform, media=BuyerMedia(kind="image", name="c.png", data=png())).media
    with store.write() as conn:  # all overdue; two came in more than a day ago (e.g. a store upgraded)
        conn.execute("UPDATE inbound_message SET received_at = received_at - 1000")
        conn.execute(f"UPDATE inbound_message SET received_at = received_at - {DAY_MS} WHERE id >= {old}")

    first = fetch_media(store, lambda _: Busy(), failing, MAX)
    assert first.state == "pending" and first.retry_at > now_ms()
    step = pipeline.reconcile(services)
    assert [f for f in step.follow_ups if isinstance(f, FetchMedia)] == []  # backing off; the others expired
    assert "0 media (2 expired)" in step.outcome
    for expired in (old, older):
        body = body_of(store, expired)
        assert (body.state, body.code, body.attempts) == ("failed", "KEFU_MEDIA_EXPIRED", 0)
    with store.read() as conn:
        assert pending_media(conn, 10, now_ms(), now=first.retry_at) == [failing]  # once the backoff is over
    second = fetch_media(store, lambda _: Busy(), failing, MAX)
    assert second.retry_at - first.retry_at >= 90_000  # a longer backoff after the second failure
    with store.write() as conn:  # the backoff passed
        conn.execute(f"UPDATE inbound_message SET body = json_set(body, '$.retry_at', 0) WHERE id = {failing}")
    assert FetchMedia(failing) in pipeline.reconcile(services).follow_ups


def test_an_image_pending_for_over_a_day_is_not_fetched(store, shop, transport, platform):
    [image] = send(store, transport, platform, media=BuyerMedia(kind="image", name="a.png", data=png())).media
    with store.write() as conn:
        conn.execute(f"UPDATE inbound_message SET received_at = received_at - {DAY_MS + 1000}")
    expired = fetch_media(store, lambda _: NeverAsked(), image, MAX)
    assert (expired.state, expired.code) == ("failed", "KEFU_MEDIA_EXPIRED")


def test_an_inline_data_url_is_stored_as_an_image_never_as_base64_text(store, settings, shop, transport, platform):
    import base64

    picture = png(4)
    url = "data:image/png;base64," + base64.b64encode(picture).decode()
    ingested = send(store, transport, platform, f"  {url}\n")
    [customer] = ingested.customer_ids
    assert ingested.media == []  # nothing to fetch: it came with the page
    lying = "data:image/jpeg;base64," + base64.b64encode(picture).decode()  # says JPEG, holds a PNG
    send(store, transport, platform, lying)
    send(store, transport, platform, url)  # the same picture again: one stored copy
    with store.read() as conn:
        rows = conn.execute("SELECT content_type, body FROM inbound_message ORDER BY id").all()
        copies = conn.execute("SELECT count(*) FROM media").scalar()
    assert [r[0] for r in rows] == ["image", "image", "image"] and copies == 1
    assert not any("base64" in r[1] for r in rows)
    stored, refused, _ = (media_body(r[1]) for r in rows)
    assert (stored.state, stored.mime, stored.size) == ("stored", "image/png", len(picture))
    assert (refused.state, refused.code) == ("refused", "KEFU_MEDIA_NOT_AN_IMAGE")
    model = Recorder()
    turn(store, settings, customer, model)
    assert images_seen(model) == [[picture, picture]]  # the lying one reads [image]
    assert "base64" not in "".join(m.content for m in model.views[0])
