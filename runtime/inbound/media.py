"""What buyers send besides text (images, files, voice, video), fetched from the platform and kept
content-addressed beside the files the shop sends (runtime.outbox.media), so the model and the
operator can see them.

A platform pages such a message as a reference (a DingTalk `downloadCode`, the simulator's media
id), never as bytes, and a reference expires. So each one is fetched soon after ingest (its own
follow-up work), an image also by the turn that needs it if that has not happened yet, and any by
the reconciler after a lost broker message. The outcome is written into the message's stored body,
next to the reference: `stored` (with the copy's sha256, type and size), `refused` (too big, empty,
or an image that is not one: final) or `failed` (the platform cannot hand it out: final after a
few tries, backed off between them; or it came in too long ago to be fetched at all). A message
whose copy is not stored reads as its label everywhere (`[image]`, `[file NAME]`, `[voice]`,
`[video]`), as before, and never holds up its conversation.

The model gets an image's bytes (a vision model, for a few rounds) and never a file's, a voice
message's or a video's: those read as their name and size, what the platform heard, or their
length (runtime.agent.rendering). Operators download a file and play voice and video in the
console (worker.console.media), from the stored copy only.

Types are told by the bytes (`sniff_media`, a small table of magic numbers: kefu has no file-type
library), never by a name or a platform's word: the type a copy is served as is one of that table,
so no buyer's upload is ever served as HTML or SVG.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import re
import zipfile
from collections.abc import Callable, Iterable
from typing import Literal

from pydantic import BaseModel

from config.retries import IMAGE_RESCUE
from runtime.agent.rendering import RenderableMessage
from runtime.agent.session_log import ImageRef
from runtime.errors import KefuError
from runtime.inbound.pages import InboundPage, MarkdownContent, TextContent
from runtime.outbox.media import clean_file_name, sniff, stage_media
from runtime.ports import ChatMessage, MediaDownloads, MediaFetchFailure, MediaTooLarge
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection

MAX_ATTEMPTS = 3  # transient fetch failures before a copy is given up as `failed`
# After a transient failure the reconciler leaves the message alone until its `retry_at`
# (config.retries.IMAGE_RESCUE from the failure), so the fetch task's own retries come first.
# A copy still pending this long after it came in is given up as `failed` with EXPIRED_CODE,
# without asking the platform: its reference has expired by then (a DingTalk `downloadCode`
# lives for hours, not days), and a store upgraded from before media were fetched holds old
# messages that read as pending; asking the platform for each would only fail slowly.
MAX_PENDING_AGE_MS = 24 * 3600 * 1000
EXPIRED_CODE = "KEFU_MEDIA_EXPIRED"
TOO_LARGE = "KEFU_MEDIA_TOO_LARGE"
# The image types OpenAI-compatible vision APIs take as image content (OpenAI, Qwen, vLLM …): a
# buyer's BMP is fetched and stored like the others but never sent to the model as an image.
VISION_MIMES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})

MediaState = Literal["pending", "stored", "refused", "failed"]
FETCHED = ("image", "file", "voice", "video")  # the content types whose bytes are fetched
OCTET_STREAM = "application/octet-stream"


class MediaBody(BaseModel):
    """A media message's stored body: what the platform paged (its reference; a file's name, a
    voice message's recognition, a duration), then what fetching made of it."""

    ref: str | None = None  # None: nothing to fetch (a voice message paged with its recognition only)
    name: str | None = None  # a file's name as the buyer sent it
    recognition: str | None = None  # a voice message as the platform heard it
    duration_ms: int | None = None  # voice and video
    media: MediaState | None = None  # None: pending
    sha256: str | None = None
    mime: str | None = None  # as sniffed from the bytes (`sniff_media`); OCTET_STREAM: none known
    size: int | None = None
    code: str | None = None  # why refused or failed
    attempts: int = 0
    retry_at: int | None = None  # ms: after a transient failure, when the reconciler may try again

    @property
    def state(self) -> MediaState:
        return self.media or "pending"


def media_body(body: str) -> MediaBody:
    """A stored media body. A file's row may hold a bare name instead of JSON: the console's
    mirror of a file the shop sent (runtime.outbox.requests)."""
    if not body.startswith("{"):
        return MediaBody(name=body)
    return MediaBody.model_validate_json(body)


def pending_media(conn: Connection, limit: int, received_before: int, now: int) -> list[int]:
    """Messages whose copy is not fetched yet that came in before then (their own fetch is
    overdue), oldest first; not one whose backoff after a transient failure runs past `now` (its
    `retry_at`), nor one too old to fetch (`expire_media` gives those up)."""
    params = {"t": received_before, "old": now - MAX_PENDING_AGE_MS, "now": now, "n": limit}
    return list(conn.execute(queries.inbound_message.MEDIA_TO_FETCH, params).scalars())


def expire_media(store: DeliveryStore, now: int, limit: int) -> int:
    """Give up copies pending for longer than MAX_PENDING_AGE_MS as `failed` EXPIRED_CODE, in
    one write and without a platform call: how many (at most `limit`; the next pass takes the
    rest). No write when there are none, the usual case."""
    with store.read() as conn:
        old = conn.execute(
            queries.inbound_message.MEDIA_TOO_OLD,
            {"old": now - MAX_PENDING_AGE_MS, "n": limit},
        ).scalars()
        ids = json.dumps(list(old))
    if ids == "[]":
        return 0
    with store.write() as conn:
        return conn.execute(queries.inbound_message.EXPIRE_MEDIA, {"ids": ids, "code": EXPIRED_CODE}).rowcount


def fetch_media(
    store: DeliveryStore,
    downloads_of: Callable[[str], object],
    message_id: int,
    max_bytes: int,
    video_max_bytes: int | None = None,
) -> MediaBody | None:
    """Fetch one message's image, file, voice or video and record the outcome (None: no such
    media message). `max_bytes` bounds each kind but video, which `video_max_bytes` bounds when
    given (KEFU_MEDIA_VIDEO_MAX_BYTES: a buyer's clip is larger than a photo or a document).
    Idempotent: a message with an outcome is not fetched again; two fetchers store the same
    content-addressed copy. Never holds the write lock across the download."""
    with store.read() as conn:
        row = conn.execute(queries.inbound_message.MEDIA_MESSAGE, {"m": message_id}).first()
    if row is None:
        return None
    account_id, body, received_at, kind = row[0], media_body(row[1]), row[2], row[3]
    if body.state != "pending" or body.ref is None:
        return body
    if received_at < now_ms() - MAX_PENDING_AGE_MS:  # its reference has expired: the platform is not asked
        return _record(store, message_id, body, "failed", code=EXPIRED_CODE)
    try:
        downloads = downloads_of(account_id)
    except KefuError as error:  # no transport in this process now: another try later
        return _record(
            store, message_id, body, "failed" if body.attempts + 1 >= MAX_ATTEMPTS else None, code=error.code
        )
    if not isinstance(downloads, MediaDownloads):
        return _record(store, message_id, body, "failed", code="KEFU_MEDIA_FETCH_UNSUPPORTED")
    limit = video_max_bytes if kind == "video" and video_max_bytes is not None else max_bytes
    try:
        data = downloads.fetch_media(account_id, body.ref, limit)
    except MediaTooLarge as too_large:
        return _record(store, message_id, body, "refused", code=TOO_LARGE, size=too_large.size)
    except MediaFetchFailure as failure:
        final = not failure.transient or body.attempts + 1 >= MAX_ATTEMPTS
        return _record(store, message_id, body, "failed" if final else None, code=failure.code)
    if len(data) > limit:  # a transport that read it all anyway
        return _record(store, message_id, body, "refused", code=TOO_LARGE, size=len(data))
    if kind == "image" and sniff(data) is None:
        return _record(store, message_id, body, "refused", code="KEFU_MEDIA_NOT_AN_IMAGE", size=len(data))
    if not data:  # a file, voice message or video of any bytes is kept; of none, there is nothing to keep
        return _record(store, message_id, body, "refused", code="KEFU_MEDIA_EMPTY", size=0)
    with store.write() as conn:
        current = _body_now(conn, message_id)
        if current is None or current.state != "pending":  # erased or pruned meanwhile, or another fetcher won
            return current
        if kind == "image":
            ref = stage_media(conn, data, f"image-{message_id}")
            return _update(conn, message_id, body, "stored", sha256=ref.sha256, mime=ref.mime, size=ref.size)
        mime, extension = typed(kind, data)
        sha256 = _stage(conn, data, mime, download_name(kind, body, message_id, extension))
        return _update(conn, message_id, body, "stored", sha256=sha256, mime=mime, size=len(data))


def _stage(conn: Connection, data: bytes, mime: str, name: str) -> str:
    """Store a buyer's file, voice or video content-addressed (`media` kind `file`: the table
    knows images and files); a copy already there (the same bytes sent twice) stays as it was."""
    digest = hashlib.sha256(data).hexdigest()
    conn.execute(
        queries.media.STAGE,
        {"h": digest, "k": "file", "m": mime, "n": name, "s": len(data), "d": data, "at": now_ms()},
    )
    return digest


def _record(
    store: DeliveryStore, message_id: int, body: MediaBody, media: MediaState | None, **fields: object
) -> MediaBody | None:
    with store.write() as conn:
        return _update(conn, message_id, body, media, **fields)


def _body_now(conn: Connection, message_id: int) -> MediaBody | None:
    current = conn.execute(queries.inbound_message.BODY, {"m": message_id}).scalar()
    return media_body(current) if current is not None else None


def _update(
    conn: Connection, message_id: int, body: MediaBody, media: MediaState | None, **fields: object
) -> MediaBody | None:
    """Write the outcome unless another fetcher wrote one first (then that one stands); None
    when the message is gone (erased or pruned while its copy was being fetched)."""
    attempts = body.attempts + (1 if media is None else 0)
    retry_at = now_ms() + round(IMAGE_RESCUE.wait_s(attempts) * 1000) if media is None else None
    new = body.model_copy(update={"media": media, "attempts": attempts, "retry_at": retry_at, **fields})
    stored = new.model_dump_json(exclude_none=True, exclude_defaults=True)
    changed = conn.execute(queries.inbound_message.RECORD_MEDIA_OUTCOME, {"b": stored, "m": message_id}).rowcount
    return new if changed else _body_now(conn, message_id)


# -- what the bytes are ---------------------------------------------------------------------

# (offset, magic, mime, extension): formats a buyer's file, voice message or video comes in. Each
# of these types is safe to serve (none is rendered as a page), and nothing else is ever served
# as anything but OCTET_STREAM (`servable`).
_MAGIC: tuple[tuple[int, bytes, str, str], ...] = (
    (0, b"%PDF-", "application/pdf", ".pdf"),
    (0, b"#!AMR-WB\n", "audio/amr-wb", ".awb"),
    (0, b"#!AMR\n", "audio/amr", ".amr"),
    (0, b"#!SILK_V3", "audio/silk", ".silk"),
    (1, b"#!SILK_V3", "audio/silk", ".silk"),  # as WeChat and QQ write it, one byte in
    (0, b"OggS", "audio/ogg", ".ogg"),
    (0, b"fLaC", "audio/flac", ".flac"),
    (0, b"ID3", "audio/mpeg", ".mp3"),
    (0, b"\x1aE\xdf\xa3", "video/webm", ".webm"),  # EBML: WebM (and Matroska)
    (0, b"Rar!\x1a\x07", "application/vnd.rar", ".rar"),
    (0, b"7z\xbc\xaf'\x1c", "application/x-7z-compressed", ".7z"),
    (0, b"\x1f\x8b", "application/gzip", ".gz"),
    (0, b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "application/x-ole-storage", ""),  # .doc, .xls, .ppt
)
# An ISO media file's brand (`ftyp`, bytes 8-12): which of the family it is; any other is MP4.
_BRANDS = {
    b"M4A ": ("audio/mp4", ".m4a"),
    b"M4B ": ("audio/mp4", ".m4a"),
    b"qt  ": ("video/quicktime", ".mov"),
    b"heic": ("image/heic", ".heic"),
    b"heix": ("image/heic", ".heic"),
    b"mif1": ("image/heif", ".heif"),
    b"avif": ("image/avif", ".avif"),
}
_RIFF = {b"WAVE": ("audio/wav", ".wav"), b"AVI ": ("video/x-msvideo", ".avi")}
# Office's and OpenDocument's ZIP files, by a member each of them has.
_ZIPPED = (
    ("word/document.xml", "application/vnd.openxmlformats-officedocument.wordprocessingml.document", ".docx"),
    ("xl/workbook.xml", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", ".xlsx"),
    ("ppt/presentation.xml", "application/vnd.openxmlformats-officedocument.presentationml.presentation", ".pptx"),
)
_OPENDOCUMENT = {
    b"application/vnd.oasis.opendocument.text": ".odt",
    b"application/vnd.oasis.opendocument.spreadsheet": ".ods",
    b"application/vnd.oasis.opendocument.presentation": ".odp",
}


def sniff_media(data: bytes) -> tuple[str, str] | None:
    """(mime, extension) of the bytes by their magic numbers (images as runtime.outbox.media
    tells them; audio: AMR, MP3, AAC, M4A, Ogg, WAV, FLAC, SILK; video: MP4, MOV, 3GP, WebM,
    AVI; documents: PDF, Office and OpenDocument files, ZIP and other archives), else None."""
    image = sniff(data)
    if image is not None:
        return image[2], image[1]
    for offset, magic, mime, extension in _MAGIC:
        if data[offset : offset + len(magic)] == magic:
            return mime, extension
    if data[4:8] == b"ftyp":
        brand = data[8:12]
        if brand.startswith((b"3gp", b"3g2")):
            return "video/3gpp", ".3gp"
        return _BRANDS.get(brand, ("video/mp4", ".mp4"))
    if data[:4] == b"RIFF" and data[8:12] in _RIFF:
        return _RIFF[data[8:12]]
    if len(data) >= 2 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0:  # an MPEG audio frame's sync
        layer = (data[1] >> 1) & 3
        if layer == 0 and data[1] & 0xF6 == 0xF0:
            return "audio/aac", ".aac"  # ADTS
        if layer != 0:
            return "audio/mpeg", ".mp3"
    if data[:4] == b"PK\x03\x04":
        return _zipped(data)
    return None


def _zipped(data: bytes) -> tuple[str, str]:
    """An Office or OpenDocument file by its members (read from the ZIP's directory), else ZIP."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
            for member, mime, extension in _ZIPPED:
                if member in names:
                    return mime, extension
            if "mimetype" in names:
                with archive.open("mimetype") as declared:
                    kind = declared.read(80).strip()
                if kind in _OPENDOCUMENT:
                    return kind.decode(), _OPENDOCUMENT[kind]
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError):
        pass  # a ZIP signature with an unreadable directory: stored as the ZIP it says it is
    return "application/zip", ".zip"


def typed(kind: str, data: bytes) -> tuple[str, str]:
    """(mime, extension) a buyer's file, voice message or video is kept as: what its bytes are
    (`sniff_media`), in its kind's family where a container serves both (an MP4 or WebM of a
    voice message is audio; an Ogg of a video is video); OCTET_STREAM when unknown (kept all the
    same, for download: nothing a buyer sent is dropped for its type)."""
    found = sniff_media(data)
    if found is None:
        return OCTET_STREAM, ""
    mime, extension = found
    if kind == "voice" and mime in ("video/mp4", "video/webm"):
        return mime.replace("video/", "audio/"), ".m4a" if mime == "video/mp4" else extension
    if kind == "video" and mime == "audio/ogg":
        return "video/ogg", ".ogv"
    return mime, extension


# Every type `sniff_media` and `typed` give, and its extension: what a copy may be served as.
_EXTENSIONS: dict[str, str] = {
    **{mime: extension for _, _, mime, extension in _MAGIC},
    **dict(_BRANDS.values()),
    **dict(_RIFF.values()),
    **{mime: extension for _, mime, extension in _ZIPPED},
    **{kind.decode(): extension for kind, extension in _OPENDOCUMENT.items()},
    "video/mp4": ".mp4",
    "audio/mp4": ".m4a",
    "video/3gpp": ".3gp",
    "audio/aac": ".aac",
    "audio/mpeg": ".mp3",
    "audio/webm": ".webm",
    "video/ogg": ".ogv",
    "application/zip": ".zip",
    **{"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp", "image/bmp": ".bmp"},
}


def servable(mime: str | None) -> str:
    """The type a stored copy is served as: its sniffed type if `sniff_media` can give it (never
    HTML, SVG or script), else OCTET_STREAM."""
    return mime if mime is not None and mime in _EXTENSIONS else OCTET_STREAM


def download_name(kind: str, body: MediaBody, message_id: int, extension: str) -> str:
    """The name a copy downloads under: a file's own (its last path part, without control
    characters), else `voice-<id>.amr`, `video-<id>.mp4` and the like."""
    if kind == "file" and body.name:
        try:
            return clean_file_name(body.name)
        except KefuError:
            pass
    return f"{kind}-{message_id}{extension}"


def extension_of(mime: str | None) -> str:
    """The extension of a type `sniff_media` gives ("" for any other)."""
    return _EXTENSIONS.get(mime or "", "")


def is_pending_image(content_type: str, body: str) -> bool:
    return content_type == "image" and media_body(body).state == "pending"


def stored_images(lines: Iterable[RenderableMessage]) -> list[ImageRef]:
    """The stored images among these lines, in order: what a user message of them carries."""
    bodies = (media_body(line.body) for line in lines if line.content_type == "image")
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


class BuyerCopy(BaseModel):
    """A stored file, voice message or video of a buyer, as an operator downloads or plays it."""

    kind: Literal["file", "voice", "video"]
    mime: str  # `servable`: what its bytes are, or OCTET_STREAM
    name: str  # what it downloads as (`download_name`)
    size: int


def buyer_media(store: DeliveryStore, customer_id: int, sha256: str) -> BuyerCopy | None:
    """A file, voice message or video this customer's buyer sent whose copy is kept; None for
    any other copy (an operator of one conversation asks for one of its own), and for one that
    retention or an erasure took."""
    with store.read() as conn:
        row = conn.execute(queries.media.BUYER_MEDIA, {"s": sha256, "c": customer_id}).first()
    if row is None or row[3] is None:
        return None
    kind, body = row[0], media_body(row[2])
    mime = servable(body.mime)
    return BuyerCopy(kind=kind, mime=mime, name=download_name(kind, body, row[1], extension_of(mime)), size=row[3])


def copy_range(store: DeliveryStore, sha256: str, start: int, length: int) -> bytes:
    """`length` bytes of a stored copy from byte `start` (0-based), read without loading the rest
    of it (a player asks a long video for a part at a time); fewer at its end, none when gone."""
    with store.read() as conn:
        data = conn.execute(queries.media.COPY_RANGE, {"s": sha256, "at": start + 1, "n": length}).scalar()
    return bytes(data) if data is not None else b""


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
                body = MediaBody(ref="inline", media="refused", code="KEFU_MEDIA_NOT_AN_IMAGE", size=len(data))
            else:
                ref = stage_media(conn, data, f"inline-{message.platform_message_id}")
                body = MediaBody(ref="inline", media="stored", sha256=ref.sha256, mime=ref.mime, size=ref.size)
            key = (group.conversation_id, message.platform_message_id)
            bodies[key] = body.model_dump_json(exclude_none=True, exclude_defaults=True)
    return bodies
