"""Files kefu sends (SPEC 3.8): one file per media message, images recognised by their bytes.

The bytes are copied into the delivery store before the send is registered, so the request
never depends on the source path again: a result-unknown send can still be inspected (and
retried by an operator) after the original file is gone.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from runtime.errors import KefuError
from runtime.store import now_ms, queries
from runtime.store.connection import Connection

# (magic prefix, extension, MIME type). BMP's two bytes are checked with its header size.
_IMAGE_MAGIC: tuple[tuple[bytes, str, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", ".png", "image/png"),
    (b"\xff\xd8\xff", ".jpg", "image/jpeg"),
    (b"GIF87a", ".gif", "image/gif"),
    (b"GIF89a", ".gif", "image/gif"),
    (b"BM", ".bmp", "image/bmp"),
)
_SAME_EXTENSION = {".jpeg": ".jpg", ".jpe": ".jpg"}


class MediaRef(BaseModel):
    """A staged file: what an outbox request points at, and what a transport is handed."""

    model_config = ConfigDict(frozen=True)
    sha256: str
    kind: str  # image | file
    mime: str
    file_name: str
    size: int


@dataclass(frozen=True)
class AttachmentPolicy:
    """Where the agent may take files from (it names them relative to this folder), and how big."""

    folder: Path
    max_bytes: int

    def resolve(self, name: str) -> Path:
        folder = self.folder.resolve()
        path = (folder / name).resolve()
        if not path.is_relative_to(folder):
            raise _invalid(f"attachment {name!r} is outside the attachments folder", "name a file inside it")
        return path


def _invalid(message: str, action: str) -> KefuError:
    return KefuError("KEFU_MEDIA_INVALID", message, action)


def sniff(data: bytes) -> tuple[str, str, str] | None:
    """(kind, extension, mime) of a recognised image (PNG, JPEG, GIF, WebP, BMP), else None
    (sent as a plain file). Which of them a vision model is shown is runtime.inbound.media's
    call (VISION_MIMES: not BMP)."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":  # a RIFF container (4-byte size between) of WebP
        return "image", ".webp", "image/webp"
    for magic, extension, mime in _IMAGE_MAGIC:
        if data.startswith(magic):
            if magic == b"BM" and (len(data) < 26 or data[14:18] not in (b"\x0c\0\0\0", b"(\0\0\0", b"|\0\0\0")):
                continue  # "BM" alone is too weak: require a known DIB header size
            return "image", extension, mime
    return None


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def clean_file_name(name: str) -> str:
    """The name a file goes out under: the last part of whatever path a browser or an OS sent
    (`C:\\fakepath\\a.png`, `../../a.png`), NFC, without control characters."""
    base = _CONTROL.sub("", unicodedata.normalize("NFC", name).replace("\\", "/").rsplit("/", 1)[-1]).strip()
    if base in ("", ".", ".."):
        raise _invalid(f"{name[:40]!r} is not a usable file name", "give the file a name")
    return base


def describe(data: bytes, name: str) -> tuple[str, str, str]:
    """(kind, completed file name, mime). An image's name gets the extension its bytes prove."""
    name = clean_file_name(name)
    found = sniff(data)
    if found is None:
        return "file", name, "application/octet-stream"
    kind, extension, mime = found
    suffix = Path(name).suffix.lower()
    if _SAME_EXTENSION.get(suffix, suffix) != extension:
        name += extension
    return kind if mime in SENDABLE_IMAGES else "file", name, mime


# What the platforms take as an image message (DingTalk's image upload: jpg, gif, png, bmp);
# another image, a WebP, goes out as a file instead of being refused.
SENDABLE_IMAGES = frozenset({"image/png", "image/jpeg", "image/gif", "image/bmp"})


def read_media_file(path: Path, max_bytes: int) -> tuple[bytes, str]:
    """The file's bytes and name, checked against `media_max_bytes` before it is read whole."""
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise _invalid(f"{path.name!r} is not a regular file", "send a file, not a directory or device")
        check_media_size(path.name, size, max_bytes)
        return path.read_bytes(), path.name
    except OSError as error:
        raise _invalid(f"cannot read {path.name!r}: {error.strerror}", "check the path and its permissions") from None


def check_media_size(name: str, size: int, max_bytes: int) -> None:
    """A file to send is neither empty nor over `media_max_bytes` (KEFU_MEDIA_MAX_BYTES)."""
    if size == 0:
        raise _invalid(f"{name!r} is empty", "send a file with content")
    if size > max_bytes:
        raise _invalid(
            f"{name!r} is {size} bytes; the limit is {max_bytes}", "send a smaller file or raise KEFU_MEDIA_MAX_BYTES"
        )


def stage_media(conn: Connection, data: bytes, name: str) -> MediaRef:
    """Store an immutable copy (content-addressed, so staging twice keeps one copy)."""
    kind, file_name, mime = describe(data, name)
    digest = hashlib.sha256(data).hexdigest()
    conn.execute(
        queries.media.STAGE,
        {"h": digest, "k": kind, "m": mime, "n": file_name, "s": len(data), "d": data, "at": now_ms()},
    )
    return MediaRef(sha256=digest, kind=kind, mime=mime, file_name=file_name, size=len(data))


def load_media(conn: Connection, sha256: str) -> tuple[MediaRef, bytes]:
    row = conn.execute(queries.media.LOAD, {"h": sha256}).mappings().first()
    if row is None:
        raise _invalid(f"staged media {sha256[:12]} is missing from the delivery store", "send the file again")
    return MediaRef.model_validate({k: row[k] for k in MediaRef.model_fields}), row["data"]
