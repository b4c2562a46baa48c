"""A buyer's file, voice message or video, served from the delivery store to an operator of its
conversation (runtime.inbound.media.buyer_media): the transcript links a file and plays voice and
video (templates/_live.html).

Served as safely as the console's own pages: always as an attachment (opening the address
downloads it; an <audio> or <video> element plays it all the same), as the type its bytes were
sniffed as, which is never HTML, SVG or script (runtime.inbound.media.servable), with `nosniff`
and a policy that lets nothing in it run. Players ask for a part at a time (`Range`), so a long
video is read from the store in parts, never whole into memory.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Literal
from urllib.parse import quote

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from runtime.inbound.media import buyer_media, copy_range
from runtime.operators.accounts import Role
from runtime.store import DeliveryStore
from worker.console.auth import require, signed_in
from worker.console.context import console_of

CHUNK = 1024 * 1024  # read from the store a part this big at a time
UNSATISFIABLE: Literal["unsatisfiable"] = "unsatisfiable"  # a range wholly past the end: 416
_SHA256 = re.compile(r"[0-9a-f]{64}")
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
_ASCII_NAME = re.compile(r"[^A-Za-z0-9._ -]")


def media(request: Request) -> Response:
    """GET /c/{customer_id}/media/{sha256}: the copy, whole (200) or the one byte range asked
    (206; 416 past its end). 404 for a copy of another conversation, and for one retention or an
    erasure took."""
    store = console_of(request).store
    require(signed_in(request, store), Role.VIEWER)
    sha256 = request.path_params["sha256"]
    if not _SHA256.fullmatch(sha256):
        raise HTTPException(404, "no such file in this conversation")
    copy = buyer_media(store, int(request.path_params["customer_id"]), sha256)
    if copy is None:
        raise HTTPException(404, "no such file in this conversation")
    headers = {
        "Content-Disposition": attachment(copy.name),
        "Accept-Ranges": "bytes",
        "Cache-Control": "private, max-age=86400",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "default-src 'none'; sandbox",  # were it ever shown as a page
    }
    span = byte_range(request.headers.get("range"), copy.size)
    if isinstance(span, str):  # UNSATISFIABLE
        return Response(status_code=416, headers={**headers, "Content-Range": f"bytes */{copy.size}"})
    start, end = span or (0, copy.size - 1)
    headers["Content-Length"] = str(end - start + 1)
    if span is not None:
        headers["Content-Range"] = f"bytes {start}-{end}/{copy.size}"
    body = _parts(store, sha256, start, end) if request.method != "HEAD" else iter(())
    return StreamingResponse(body, status_code=206 if span else 200, media_type=copy.mime, headers=headers)


def _parts(store: DeliveryStore, sha256: str, start: int, end: int) -> Iterator[bytes]:
    """Bytes start..end (inclusive) of a copy, a CHUNK at a time (Starlette iterates this in its
    thread pool). A copy pruned meanwhile ends the body short: the client sees it cut off."""
    at = start
    while at <= end:
        part = copy_range(store, sha256, at, min(CHUNK, end - at + 1))
        if not part:
            return
        yield part
        at += len(part)


def byte_range(header: str | None, size: int) -> tuple[int, int] | Literal["unsatisfiable"] | None:
    """The one byte range a `Range` header asks of `size` bytes, as (first, last) inclusive;
    None to send it all (no header, or one this does not serve: several ranges, another unit);
    UNSATISFIABLE for a range wholly past the end."""
    match = _RANGE.fullmatch(header.strip()) if header else None
    if match is None or size <= 0 or not (match[1] or match[2]):
        return None
    if not match[1]:  # the last N bytes
        return max(size - int(match[2]), 0), size - 1
    first = int(match[1])
    last = min(int(match[2]), size - 1) if match[2] else size - 1
    if first >= size:
        return UNSATISFIABLE
    return (first, last) if first <= last else None


def attachment(name: str) -> str:
    """Content-Disposition for a download named `name`: an ASCII stand-in for old clients, and the
    name itself (UTF-8, RFC 6266) for every browser the console supports."""
    fallback = _ASCII_NAME.sub("_", name).strip() or "download"
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"
