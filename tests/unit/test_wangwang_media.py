"""A Wangwang buyer's image through the bridge's `media.get`, against the fake bridge over real
HTTP: refused on its declared size before a byte of it is read, cut at the limit when the bridge
understated it, an unknown or expired media id final, throttling, 5xx and timeouts transient."""

from __future__ import annotations

import pytest

from runtime.accounts.registry import AccountSpec, create_account
from runtime.inbound.ingest import ingest_page
from runtime.inbound.media import fetch_media
from runtime.inbound.pages import ImageContent
from runtime.ports import MediaDownloads, MediaFetchFailure, MediaTooLarge
from tests.fakes.wangwang import FakeWangwangBridge
from tests.unit.test_inbound_images import png
from tests.unit.test_wangwang import BUYER, credentials_for
from transports.wangwang import WangwangTransport
from transports.wangwang.media import download_url

PICTURE = png()
MAX = 10 * 1024 * 1024


@pytest.fixture
def transport(fake_wangwang: FakeWangwangBridge) -> WangwangTransport:
    credentials = credentials_for(fake_wangwang)
    return WangwangTransport(lambda _: credentials, timeout_s=2)


def failure_of(transport: WangwangTransport, media_id: str, max_bytes: int = MAX) -> MediaFetchFailure:
    with pytest.raises(MediaFetchFailure) as failed:
        transport.fetch_media("ww", media_id, max_bytes)
    return failed.value


def test_an_image_is_paged_by_its_media_id_and_fetched_by_it(fake_wangwang, transport):
    assert isinstance(transport, MediaDownloads)
    media_id = fake_wangwang.buyer_sends_image(BUYER, PICTURE)
    [message] = transport.page_after("ww", None).groups[0].messages
    assert message.content == ImageContent(ref=media_id)
    assert transport.fetch_media("ww", media_id, MAX) == PICTURE
    assert (fake_wangwang.media_gets, fake_wangwang.downloads) == ([media_id], [media_id])
    fake_wangwang.relative_urls = True  # a path on the bridge does as well as a whole URL
    assert transport.fetch_media("ww", media_id, MAX) == PICTURE


def test_over_the_limit_is_refused_on_the_declared_size_before_the_body_is_read(fake_wangwang, transport):
    big = fake_wangwang.buyer_sends_image(BUYER, PICTURE + b"\x00" * 5000)
    with pytest.raises(MediaTooLarge) as refused:
        transport.fetch_media("ww", big, 1000)
    assert refused.value.size == len(PICTURE) + 5000
    assert fake_wangwang.media_gets == [big] and fake_wangwang.downloads == []  # never downloaded


def test_a_bridge_that_understates_the_size_is_cut_at_the_limit(fake_wangwang, transport):
    data = PICTURE + b"\x00" * (4 * 1024 * 1024)
    lying = fake_wangwang.buyer_sends_image(BUYER, data, declared_size=len(PICTURE))
    with pytest.raises(MediaTooLarge) as refused:  # the download's Content-Length says so
        transport.fetch_media("ww", lying, 1000)
    assert refused.value.size == len(data)
    fake_wangwang.content_length = False  # nothing says so: reading stops just past the limit
    with pytest.raises(MediaTooLarge) as cut:
        transport.fetch_media("ww", lying, 1000)
    assert 1000 < cut.value.size < len(data)
    fake_wangwang.content_length = True
    short = fake_wangwang.buyer_sends_image(BUYER, PICTURE, declared_size=len(PICTURE) + 1)
    assert (failure_of(transport, short).code, failure_of(transport, short).transient) == (
        "WANGWANG_MEDIA_SIZE_MISMATCH",
        True,
    )


def test_an_unknown_or_expired_media_id_is_final(fake_wangwang, transport):
    unknown = failure_of(transport, "ww-media-never")
    assert (unknown.code, unknown.transient) == ("WANGWANG_MEDIA_NOT_FOUND", False)
    expired = fake_wangwang.buyer_sends_image(BUYER, PICTURE)
    fake_wangwang.forget_media(expired)
    assert (failure_of(transport, expired).code, failure_of(transport, expired).transient) == (
        "WANGWANG_MEDIA_NOT_FOUND",
        False,
    )
    fake_wangwang.download_ttl_s = 0  # the download URL expired before it was read: a 404
    url_gone = failure_of(transport, fake_wangwang.buyer_sends_image(BUYER, PICTURE))
    assert (url_gone.code, url_gone.transient) == ("WANGWANG_MEDIA_DOWNLOAD_HTTP_404", False)


def test_wrong_credentials_are_final(fake_wangwang):
    credentials = credentials_for(fake_wangwang, app_secret="nope")
    media_id = fake_wangwang.buyer_sends_image(BUYER, PICTURE)
    refused = failure_of(WangwangTransport(lambda _: credentials, timeout_s=2), media_id)
    assert (refused.code, refused.transient) == ("WANGWANG_INVALID_SIGNATURE", False)


def test_throttling_5xx_offline_and_timeouts_are_transient_and_a_later_try_succeeds(fake_wangwang, transport):
    media_id = fake_wangwang.buyer_sends_image(BUYER, PICTURE)
    fake_wangwang.fail_media_gets = ["THROTTLED", 503, "INTERNAL_ERROR", "SELLER_OFFLINE"]
    fake_wangwang.fail_downloads = [502, 429, "stall"]
    fake_wangwang.stall_s = 3.0  # past the 2 s timeout
    seen = [failure_of(transport, media_id) for _ in range(7)]
    assert [(f.code, f.transient) for f in seen] == [
        ("WANGWANG_THROTTLED", True),
        ("WANGWANG_HTTP_503", True),
        ("WANGWANG_INTERNAL_ERROR", True),
        ("WANGWANG_SELLER_OFFLINE", True),
        ("WANGWANG_MEDIA_DOWNLOAD_HTTP_502", True),
        ("WANGWANG_MEDIA_DOWNLOAD_HTTP_429", True),
        ("WANGWANG_MEDIA_DOWNLOAD_ReadTimeout", True),
    ]
    assert transport.fetch_media("ww", media_id, MAX) == PICTURE
    fake_wangwang.stop()  # the bridge stops answering: the call times out
    silent = failure_of(transport, media_id)
    assert (silent.code, silent.transient) == ("WANGWANG_NO_RESPONSE_ReadTimeout", True)


def test_a_download_url_is_http_on_the_bridge_or_absolute_and_nothing_else():
    bridge = "http://127.0.0.1:9/ww/"
    assert str(download_url(bridge, "/media/t")) == "http://127.0.0.1:9/media/t"
    assert str(download_url(bridge, "https://cdn.example/x?t=1")) == "https://cdn.example/x?t=1"
    assert download_url(bridge, "file:///etc/passwd") is None
    assert download_url(bridge, "ftp://example/x") is None


def test_fetched_into_the_store_or_refused_there(store, fake_wangwang, transport):
    create_account(store, AccountSpec(id="ww", platform="wangwang", identity=fake_wangwang.seller_id))
    fake_wangwang.buyer_sends_image(BUYER, PICTURE)
    fake_wangwang.buyer_sends_image(BUYER, PICTURE + b"\x00" * (11 * 1024 * 1024))
    small, big = ingest_page(store, transport.page_after("ww", None)).media
    stored = fetch_media(store, lambda _: transport, small, MAX)
    assert stored is not None and (stored.state, stored.mime, stored.size) == ("stored", "image/png", len(PICTURE))
    refused = fetch_media(store, lambda _: transport, big, MAX)
    assert refused is not None and (refused.state, refused.code) == ("refused", "KEFU_MEDIA_TOO_LARGE")
    assert len(fake_wangwang.downloads) == 1  # the big one was never downloaded
