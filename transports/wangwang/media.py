"""A buyer's media through the bridge: `kefu.wangwang.media.get` (docs/wangwang-gateway.md).

The bridge answers the item's size, type and a short-lived download URL, not the bytes. kefu
refuses an item over its limit on the declared size, before one byte of it is read; then it
reads the URL, refusing again on a larger `Content-Length`, and stops one byte past the limit
whatever the bridge declared. The URL carries its own short-lived token: it is never logged and
never appears in a code. The bridge is another program: the URL it answers, and every redirect
from there, is read only on the bridge's own host or a host the operator named
(KEFU_WANGWANG__MEDIA_HOSTS), never anywhere else it points kefu to (an internal service).
"""

from __future__ import annotations

import time
from collections.abc import Collection

import httpx

from runtime.ports import MediaFetchFailure, MediaTooLarge
from transports.wangwang.client import GatewayClient, GatewayFailure
from transports.wangwang.credentials import WangwangCredentials
from transports.wangwang.protocol import MediaInfo

MEDIA_GET = "kefu.wangwang.media.get"
# Refusals worth another try later (kefu tries an image a few times, backed off); any other
# refusal is final: MEDIA_NOT_FOUND (unknown or expired), credentials refused, a bad parameter.
TRANSIENT = ("THROTTLED", "SELLER_OFFLINE", "TIMESTAMP_OUT_OF_RANGE", "INTERNAL_ERROR")
# Download answers worth another try: the bridge or its store is busy or down.
TRANSIENT_HTTP = (408, 425, 429)
# The whole download, however slowly the bytes trickle in (each read has the call timeout too).
DOWNLOAD_DEADLINE_S = 120.0
MAX_REDIRECTS = 3
NOT_ALLOWED = "WANGWANG_MEDIA_URL_NOT_ALLOWED"


def fetch_media(
    client: GatewayClient,
    credentials: WangwangCredentials,
    media_id: str,
    max_bytes: int,
    media_hosts: Collection[str] = (),
) -> bytes:
    """The bytes of the inbound media item `media_id` (a message's `media_id`). Raises
    MediaTooLarge past `max_bytes` and MediaFetchFailure when the bridge cannot hand it out.
    `media_hosts`: hosts besides the bridge's own the download may be read from."""
    try:
        info = client.call(credentials, MEDIA_GET, {"media_id": media_id}, MediaInfo)
    except GatewayFailure as failure:
        transient = failure.stage != "refused" or failure.code in TRANSIENT
        raise MediaFetchFailure(failure.kefu_code, transient=transient) from None
    if info.size > max_bytes:
        raise MediaTooLarge(info.size)  # nothing downloaded
    url = download_url(credentials.gateway_url, info.download_url)
    if url is None:
        raise MediaFetchFailure("WANGWANG_MEDIA_BAD_URL", transient=False)
    allowed = {httpx.URL(credentials.gateway_url).host, *(host.lower() for host in media_hosts)}
    data = _download(client.http, url, max_bytes, allowed)
    if len(data) != info.size:  # cut short, or not the item described
        raise MediaFetchFailure("WANGWANG_MEDIA_SIZE_MISMATCH", transient=True)
    return data


def download_url(gateway_url: str, answered: str) -> httpx.URL | None:
    """The URL to read: absolute (http or https), or a path on the bridge, resolved against the
    gateway URL. None for anything else."""
    try:
        url = httpx.URL(gateway_url.rstrip("/") + "/").join(answered)
    except (httpx.InvalidURL, ValueError, TypeError):
        return None
    return url if url.scheme in ("http", "https") and url.host else None


def _download(http: httpx.Client, url: httpx.URL, max_bytes: int, allowed: set[str]) -> bytes:
    deadline = time.monotonic() + DOWNLOAD_DEADLINE_S
    try:
        for _ in range(MAX_REDIRECTS + 1):
            if url.host not in allowed or url.userinfo:
                raise MediaFetchFailure(NOT_ALLOWED, transient=False)
            # identity: images are compressed already, and no decoder may blow a chunk up past the limit
            with http.stream("GET", url, headers={"Accept-Encoding": "identity"}, follow_redirects=False) as response:
                if response.is_redirect and response.next_request is not None:
                    url = response.next_request.url  # checked like the first, before it is asked
                    continue
                return _body(response, max_bytes, deadline)
    except httpx.HTTPError as error:  # its message may name the URL: only the class is kept
        raise MediaFetchFailure(f"WANGWANG_MEDIA_DOWNLOAD_{type(error).__name__}", transient=True) from None
    raise MediaFetchFailure("WANGWANG_MEDIA_TOO_MANY_REDIRECTS", transient=False)


def _body(response: httpx.Response, max_bytes: int, deadline: float) -> bytes:
    if not response.is_success:
        status = response.status_code
        transient = status >= 500 or status in TRANSIENT_HTTP
        raise MediaFetchFailure(f"WANGWANG_MEDIA_DOWNLOAD_HTTP_{status}", transient=transient)
    length = response.headers.get("Content-Length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise MediaTooLarge(int(length))
    data = bytearray()
    for chunk in response.iter_bytes():
        data += chunk
        if len(data) > max_bytes:  # the bridge understated the size: read no further
            raise MediaTooLarge(len(data))
        if time.monotonic() > deadline:
            raise MediaFetchFailure("WANGWANG_MEDIA_DOWNLOAD_TIMEOUT", transient=True)
    return bytes(data)
