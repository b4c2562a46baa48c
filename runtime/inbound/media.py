"""Images buyers send, fetched from the platform and kept content-addressed beside the files the
shop sends (runtime.outbox.media), so the model and the operator can see them.

A platform pages an image as a reference (a DingTalk `downloadCode`, the simulator's media id),
never as bytes, and a reference expires. So each image is fetched soon after ingest (its own
follow-up work), by the turn that needs it if that has not happened yet, and by the reconciler
after a lost broker message. The outcome is written into the message's stored body, next to
the reference: `stored` (with the copy's sha256, type and size), `refused` (too big, or not an
image: final) or `failed` (the platform cannot hand it out: final after a few tries, backed off
between them; or it came in too long ago to be fetched at all). An image that is not stored reads
as `[image]` everywhere, as before.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterable
from typing import Literal

from pydantic import BaseModel

from config.retries import IMAGE_RESCUE
from runtime.agent.rendering import RenderableMessage
from runtime.agent.session_log import ImageRef
from runtime.errors import KefuError
from runtime.inbound.pages import InboundPage, MarkdownContent, TextContent
from runtime.outbox.media import sniff, stage_media
from runtime.ports import ChatMessage, MediaDownloads, MediaFetchFailure, MediaTooLarge
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection

MAX_ATTEMPTS = 3  # transient fetch failures before an image is given up as `failed`
# After a transient failure the reconciler leaves the image alone until its `retry_at`
# (config.retries.IMAGE_RESCUE from the failure), so the fetch task's own retries come first.
# An image still pending this long after it came in is given up as `failed` with EXPIRED_CODE,
# without asking the platform: its reference has expired by then (a DingTalk `downloadCode`
# lives for hours, not days), and a store upgraded from before images were fetched holds old
# image messages that read as pending; asking the platform for each would only fail slowly.
MAX_PENDING_AGE_MS = 24 * 3600 * 1000
EXPIRED_CODE = "KEFU_MEDIA_EXPIRED"
# The image types OpenAI-compatible vision APIs take as image content (OpenAI, Qwen, vLLM …): a
# buyer's BMP is fetched and stored like the others but never sent to the model as an image.
VISION_MIMES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})

MediaState = Literal["pending", "stored", "refused", "failed"]


class ImageBody(BaseModel):
    """An image message's stored body: the platform's reference, then what fetching made of it."""

    ref: str
    media: MediaState | None = None  # None: pending
    sha256: str | None = None
    mime: str | None = None
    size: int | None = None
    code: str | None = None  # why refused or failed
    attempts: int = 0
    retry_at: int | None = None  # ms: after a transient failure, when the reconciler may try again

    @property
    def state(self) -> MediaState:
        return self.media or "pending"


def image_body(body: str) -> ImageBody:
    return ImageBody.model_validate_json(body)


def pending_images(conn: Connection, limit: int, received_before: int, now: int) -> list[int]:
    """Images not fetched yet that came in before then (their own fetch is overdue), oldest
    first; not one whose backoff after a transient failure runs past `now` (its `retry_at`), nor
    one too old to fetch (`expire_images` gives those up)."""
    params = {"t": received_before, "old": now - MAX_PENDING_AGE_MS, "now": now, "n": limit}
    return list(conn.execute(queries.inbound_message.IMAGES_TO_FETCH, params).scalars())


def expire_images(store: DeliveryStore, now: int, limit: int) -> int:
    """Give up images pending for longer than MAX_PENDING_AGE_MS as `failed` EXPIRED_CODE, in
    one write and without a platform call: how many (at most `limit`; the next pass takes the
    rest). No write when there are none, the usual case."""
    with store.read() as conn:
        old = conn.execute(
            queries.inbound_message.IMAGES_TOO_OLD,
            {"old": now - MAX_PENDING_AGE_MS, "n": limit},
        ).scalars()
        ids = json.dumps(list(old))
    if ids == "[]":
        return 0
    with store.write() as conn:
        return conn.execute(queries.inbound_message.EXPIRE_IMAGES, {"ids": ids, "code": EXPIRED_CODE}).rowcount


def fetch_image(
    store: DeliveryStore, downloads_of: Callable[[str], object], message_id: int, max_bytes: int
) -> ImageBody | None:
    """Fetch one image and record the outcome (None: no such image message). Idempotent: an
    image with an outcome is not fetched again; two fetchers store the same content-addressed
    copy. Never holds the write lock across the download."""
    with store.read() as conn:
        row = conn.execute(queries.inbound_message.IMAGE, {"m": message_id}).first()
    if row is None:
        return None
    account_id, body = row[0], image_body(row[1])
    if body.state != "pending":
        return body
    if row[2] < now_ms() - MAX_PENDING_AGE_MS:  # its reference has expired: the platform is not asked
        return _record(store, message_id, body, "failed", code=EXPIRED_CODE)
    try:
        downloads = downloads_of(account_id)
    except KefuError as error:  # no transport in this process now: another try later
        return _record(
            store, message_id, body, "failed" if body.attempts + 1 >= MAX_ATTEMPTS else None, code=error.code
        )
    if not isinstance(downloads, MediaDownloads):
        return _record(store, message_id, body, "failed", code="KEFU_MEDIA_FETCH_UNSUPPORTED")
    try:
        data = downloads.fetch_media(account_id, body.ref, max_bytes)
    except MediaTooLarge as too_large:
        return _record(store, message_id, body, "refused", code="KEFU_MEDIA_TOO_LARGE", size=too_large.size)
    except MediaFetchFailure as failure:
        final = not failure.transient or body.attempts + 1 >= MAX_ATTEMPTS
        return _record(store, message_id, body, "failed" if final else None, code=failure.code)
    if len(data) > max_bytes:  # a transport that read it all anyway
        return _record(store, message_id, body, "refused", code="KEFU_MEDIA_TOO_LARGE", size=len(data))
    if not data or sniff(data) is None:
        return _record(store, message_id, body, "refused", code="KEFU_MEDIA_NOT_AN_IMAGE", size=len(data))
    with store.write() as conn:
        current = _body_now(conn, message_id)
        if current is None or current.state != "pending":  # erased or pruned meanwhile, or another fetcher won
            return current
        ref = stage_media(conn, data, f"image-{message_id}")
        return _update(conn, message_id, body, "stored", sha256=ref.sha256, mime=ref.mime, size=ref.size)


def _record(
    store: DeliveryStore, message_id: int, body: ImageBody, media: MediaState | None, **fields: object
) -> ImageBody | None:
    with store.write() as conn:
        return _update(conn, message_id, body, media, **fields)


def _body_now(conn: Connection, message_id: int) -> ImageBody | None:
    current = conn.execute(queries.inbound_message.BODY, {"m": message_id}).scalar()
    return image_body(current) if current is not None else None


def _update(
    conn: Connection, message_id: int, body: ImageBody, media: MediaState | None, **fields: object
) -> ImageBody | None:
    """Write the outcome unless another fetcher wrote one first (then that one stands); None
    when the message is gone (erased or pruned while its image was being fetched)."""
    attempts = body.attempts + (1 if media is None else 0)
    retry_at = now_ms() + round(IMAGE_RESCUE.wait_s(attempts) * 1000) if media is None else None
    new = body.model_copy(update={"media": media, "attempts": attempts, "retry_at": retry_at, **fields})
    stored = new.model_dump_json(exclude_none=True, exclude_defaults=True)
    changed = conn.execute(queries.inbound_message.RECORD_IMAGE_OUTCOME, {"b": stored, "m": message_id}).rowcount
    return new if changed else _body_now(conn, message_id)


def is_pending_image(content_type: str, body: str) -> bool:
    return content_type == "image" and image_body(body).state == "pending"


def stored_images(lines: Iterable[RenderableMessage]) -> list[ImageRef]:
    """The stored images among these lines, in order: what a user message of them carries."""
    bodies = (image_body(line.body) for line in lines if line.content_type == "image")
    return [ImageRef(sha256=b.sha256, mime=b.mime) for b in bodies if b.state == "stored" and b.sha256 and b.mime]


def with_image_data(store: DeliveryStore, view: list[ChatMessage]) -> list[ChatMessage]:
    """Messages of the model's view (those that show images: runtime.agent.view.model_view)
    with each image's bytes loaded from the store, for the call. Left out:
    an image whose copy is gone (e.g. erased meanwhile), and one of a type vision models do not
    take (not in VISION_MIMES: a BMP). Such an image is stored all the same, so operators see it,
    and the model reads its line's `[image]`, as for any model without vision."""
    wanted = {image.sha256 for message in view for image in message.images if image.mime in VISION_MIMES}
    if not wanted:
        return view
    with store.read() as conn:
        rows = conn.execute(queries.media.DATA, {"s": json.dumps(sorted(wanted))}).all()
    data = {sha256: bytes(blob) for sha256, blob in rows}
    return [
        message.model_copy(
            update={
                "images": [i.model_copy(update={"data": data[i.sha256]}) for i in message.images if i.sha256 in data]
            }
        )
        if message.images
        else message
        for message in view
    ]


def with_fetched_images(
    store: DeliveryStore, lines: list[RenderableMessage], fetch: Callable[[list[int]], object] | None
) -> list[RenderableMessage]:
    """The lines after fetching their images not fetched yet (their bodies read again)."""
    pending = [line.id for line in lines if line.id is not None and is_pending_image(line.content_type, line.body)]
    if not pending or fetch is None:
        return lines
    fetch(pending)
    with store.read() as conn:
        rows = conn.execute(queries.inbound_message.BODIES, {"ids": json.dumps(pending)}).all()
    bodies: dict[int, str] = {message_id: body for message_id, body in rows}
    return [line.model_copy(update={"body": bodies[line.id]}) if line.id in bodies else line for line in lines]


def buyer_image(store: DeliveryStore, customer_id: int, sha256: str) -> tuple[str, bytes] | None:
    """(mime, bytes) of an image this customer's buyer sent, for an operator to look at; None
    for any other copy (an operator of one conversation asks for one of its images only)."""
    with store.read() as conn:
        row = conn.execute(queries.media.BUYER_IMAGE, {"s": sha256, "c": customer_id}).first()
    return (row[0], bytes(row[1])) if row is not None else None


# A text or Markdown message that is nothing but an image as a data URL (seed 001: PNG, JPEG, WebP
# or GIF inline): stored as an image, never as base64 text in the history or the model's input.
_DATA_URL = re.compile(r"data:(image/(?:png|jpeg|webp|gif));base64,([A-Za-z0-9+/]+={0,2})")


def inline_images(conn: Connection, page: InboundPage) -> dict[tuple[str, str], str]:
    """Inside ingest's transaction: the stored image body of each text message of the page that
    is an inline image, by (conversation id, platform message id); its bytes staged in `media`
    (content-addressed, so a replay stores nothing twice). Bytes that are not the image the URL
    says are kept as a refused image, never as text."""
    bodies: dict[tuple[str, str], str] = {}
    for group in page.groups:
        for message in group.messages:
            content = message.content
            if not isinstance(content, TextContent | MarkdownContent) or not content.text.lstrip().startswith(
                "data:image/"
            ):
                continue
            match = _DATA_URL.fullmatch(content.text.strip())
            if match is None:
                continue
            try:
                data = base64.b64decode(match[2], validate=True)
            except binascii.Error:
                data = b""
            found = sniff(data)
            if found is None or found[2] != match[1]:
                body = ImageBody(ref="inline", media="refused", code="KEFU_MEDIA_NOT_AN_IMAGE", size=len(data))
            else:
                ref = stage_media(conn, data, f"inline-{message.platform_message_id}")
                body = ImageBody(ref="inline", media="stored", sha256=ref.sha256, mime=ref.mime, size=ref.size)
            key = (group.conversation_id, message.platform_message_id)
            bodies[key] = body.model_dump_json(exclude_none=True, exclude_defaults=True)
    return bodies
