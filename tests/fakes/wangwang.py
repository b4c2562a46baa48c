"""A Wangwang bridge speaking docs/wangwang-gateway.md, on loopback: real HTTP, real TOP-style
signatures (a bad or stale one is refused), one ordered event log of buyer messages, the
shop's echoes and read events, paged by opaque cursors until confirmed, and idempotent sends
keyed by client reference. Its record of sends is the ground truth for duplicate replies.
Buyers' images are paged by `media_id` and handed out by `media.get` as a short-lived download
URL on the bridge itself (GET /media/<token>), which `downloads` records.
"""

from __future__ import annotations

import base64
import itertools
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl

from tests.fakes.http import answer_json
from transports.wangwang.signing import check

Answer = tuple[int, dict[str, Any]]


@dataclass
class BridgeSend:
    client_ref: str
    conversation_id: str
    to_id: str | None
    content_type: str
    text: str
    media_bytes: int
    message_id: str


@dataclass
class FakeWangwangBridge:
    app_key: str = "ww-app"
    app_secret: str = "ww-secret"
    seller_id: str = "cntaobao好物小店"
    # scripted behaviour
    throttle_sends: int = 0
    stall_sends: int = 0
    stall_s: float = 0.0
    fail_confirms: int = 0  # answer 503 to this many confirms (kefu crashed before confirming)
    offline: bool = False
    # the next `media.get` calls, one entry each: a gateway error code ("THROTTLED") or an HTTP status
    fail_media_gets: list[str | int] = field(default_factory=list)
    # the next downloads, one entry each: an HTTP status, or "stall" (headers, then `stall_s` of silence)
    fail_downloads: list[str | int] = field(default_factory=list)
    download_ttl_s: float = 60.0
    relative_urls: bool = False  # answer `/media/<token>` instead of an absolute URL
    hostile_url: str | None = None  # answer this download URL instead (a bridge pointing kefu elsewhere)
    content_length: bool = True  # send Content-Length with a download (else the body ends at close)
    # buyers the shop may write to first (e.g. who ordered), besides those who wrote
    known_buyers: set[str] = field(default_factory=set)
    # what happened
    sends: list[BridgeSend] = field(default_factory=list)
    confirms: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # error codes answered
    media_gets: list[str] = field(default_factory=list)  # media ids asked for
    downloads: list[str] = field(default_factory=list)  # media ids whose bytes were served

    def __post_init__(self) -> None:
        self._events: list[tuple[int, str, dict[str, Any]]] = []  # (seq, "message" | "read", item)
        self._confirmed = 0
        self._seq = itertools.count(1)
        self._ids = itertools.count(1)
        self._changed = threading.Condition()
        self._server: ThreadingHTTPServer | None = None
        self._media: dict[str, tuple[bytes, str, int]] = {}  # media id -> (bytes, mime, declared size)
        self._tokens: dict[str, tuple[str, float]] = {}  # download token -> (media id, valid until)

    def start(self) -> FakeWangwangBridge:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # -- what a test does ------------------------------------------------------------------

    def buyer_says(self, buyer: str, text: str, conversation_id: str | None = None) -> str:
        message_id = f"ww-m{next(self._ids)}"
        self._append(
            "message",
            {
                "message_id": message_id,
                "conversation_id": conversation_id or f"conv-{buyer}",
                "conversation_type": "direct",
                "sender_id": buyer,
                "sender_nick": buyer.removeprefix("cntaobao"),
                "sender_role": "buyer",
                "content_type": "text",
                "text": text,
                "sent_at": int(time.time() * 1000),
            },
        )
        return message_id

    def buyer_sends_image(
        self,
        buyer: str,
        data: bytes,
        mime: str = "image/png",
        conversation_id: str | None = None,
        declared_size: int | None = None,
    ) -> str:
        """An image message (its bytes kept by the bridge under a media id); returns the media id.
        `declared_size`: what `media.get` says the size is (a bridge bug), when not the truth."""
        media_id = f"ww-media-{next(self._ids)}"
        self._media[media_id] = (data, mime, len(data) if declared_size is None else declared_size)
        self._append(
            "message",
            {
                "message_id": f"ww-m{next(self._ids)}",
                "conversation_id": conversation_id or f"conv-{buyer}",
                "conversation_type": "direct",
                "sender_id": buyer,
                "sender_nick": buyer.removeprefix("cntaobao"),
                "sender_role": "buyer",
                "content_type": "image",
                "media_id": media_id,
                "sent_at": int(time.time() * 1000),
            },
        )
        return media_id

    def forget_media(self, media_id: str) -> None:
        """The bridge no longer keeps the item (expired): `media.get` answers MEDIA_NOT_FOUND."""
        self._media.pop(media_id, None)

    def push_message(self, item: dict[str, Any]) -> None:
        """Any message item as the bridge would serve it (a bridge bug included)."""
        self._append("message", item)

    def buyer_reads(self, message_id: str) -> None:
        sent = next(s for s in self.sends if s.message_id == message_id)
        self._append(
            "read",
            {
                "message_id": message_id,
                "conversation_id": sent.conversation_id,
                "reader_id": sent.to_id,
                "read_at": int(time.time() * 1000),
            },
        )

    def replies_to(self, buyer: str) -> list[BridgeSend]:
        return [s for s in self.sends if s.to_id == buyer]

    def _append(self, kind: str, item: dict[str, Any]) -> None:
        with self._changed:
            self._events.append((next(self._seq), kind, item))
            self._changed.notify_all()

    # -- methods ---------------------------------------------------------------------------

    def handle(self, params: dict[str, str]) -> Answer:
        if params.get("app_key") != self.app_key:
            return self._error("UNKNOWN_APP_KEY", "no such app_key")
        problem = check(params, self.app_secret, datetime.now(UTC))
        if problem is not None:
            return self._error(problem, "the sign does not match" if problem == "INVALID_SIGNATURE" else problem)
        if params.get("seller_id") != self.seller_id:
            return self._error("UNKNOWN_SELLER", "this bridge does not serve that seller")
        method = params.get("method", "")
        handler = {
            "kefu.wangwang.identity.get": self._identity,
            "kefu.wangwang.messages.get": self._messages,
            "kefu.wangwang.messages.confirm": self._confirm,
            "kefu.wangwang.message.send": self._send,
            "kefu.wangwang.send.get": self._lookup,
            "kefu.wangwang.media.get": self._media_get,
        }.get(method)
        if handler is None:
            return self._error("INVALID_PARAMETER", "method")
        return handler(params)

    def _identity(self, params: dict[str, str]) -> Answer:
        nick = self.seller_id.removeprefix("cntaobao")
        return self._ok(params, {"seller_id": self.seller_id, "seller_nick": nick, "service_accounts": []})

    def _messages(self, params: dict[str, str]) -> Answer:
        try:
            limit, wait_s = int(params.get("limit", "50")), int(params.get("wait_s", "0"))
            after = int(params["cursor"].removeprefix("c")) if params.get("cursor") else 0
        except ValueError:
            return self._error("INVALID_PARAMETER", "limit, wait_s or cursor")
        if not 1 <= limit <= 100 or not 0 <= wait_s <= 30:
            return self._error("INVALID_PARAMETER", "limit or wait_s out of range")
        start = max(after, self._confirmed)
        with self._changed:
            self._changed.wait_for(lambda: any(seq > start for seq, _, _ in self._events), timeout=wait_s)
            page = [e for e in self._events if e[0] > start][:limit]
        answer: dict[str, Any] = {
            "messages": [item for _, kind, item in page if kind == "message"],
            "reads": [item for _, kind, item in page if kind == "read"],
        }
        if page or params.get("cursor"):
            answer["next_cursor"] = f"c{page[-1][0]}" if page else params["cursor"]
        return self._ok(params, answer)

    def _confirm(self, params: dict[str, str]) -> Answer:
        if self.fail_confirms:
            self.fail_confirms -= 1
            return 503, {}
        cursor = params.get("cursor", "")
        if not cursor.startswith("c") or not cursor[1:].isdigit():
            return self._error("INVALID_PARAMETER", "cursor")
        self.confirms.append(cursor)
        self._confirmed = max(self._confirmed, int(cursor[1:]))
        return self._ok(params, {"confirmed": True})

    def _send(self, params: dict[str, str]) -> Answer:
        if self.offline:
            return self._error("SELLER_OFFLINE", "Qianniu is not logged in", retry_after_s=5)
        if self.throttle_sends:
            self.throttle_sends -= 1
            return self._error("THROTTLED", "too many sends", retry_after_s=1)
        ref, to_id = params.get("client_ref", ""), params.get("to_id")
        if not ref or params.get("content_type") not in ("text", "image", "file"):
            return self._error("INVALID_PARAMETER", "client_ref or content_type")
        earlier = next((s for s in self.sends if s.client_ref == ref), None)
        if earlier is not None:
            if earlier.text != params.get("text", ""):
                return self._error("CLIENT_REF_CONFLICT", "client_ref reused for other content")
            return self._ok(params, {"message_id": earlier.message_id})
        buyers = {item["sender_id"] for _, kind, item in self._events if kind == "message"} | self.known_buyers
        if to_id not in buyers:
            return self._error("RECIPIENT_UNAVAILABLE", "to_id is not a buyer of this shop")
        media = len(base64.b64decode(params["media"])) if params.get("media") else 0
        sent = BridgeSend(
            ref,
            params.get("conversation_id", ""),
            to_id,
            params["content_type"],
            params.get("text", ""),
            media,
            f"ww-s{next(self._ids)}",
        )
        self.sends.append(sent)
        self._append(  # the shop's own message shows up in the chat, with kefu's reference
            "message",
            {
                "message_id": sent.message_id,
                "conversation_id": sent.conversation_id,
                "conversation_type": "direct",
                "sender_id": f"{self.seller_id}:客服",
                "sender_role": "service",
                "content_type": sent.content_type,
                "text": sent.text,
                "sent_at": int(time.time() * 1000),
                "client_ref": ref,
            },
        )
        if self.stall_sends:
            self.stall_sends -= 1
            time.sleep(self.stall_s)  # sent: only the answer is late
        return self._ok(params, {"message_id": sent.message_id})

    def _lookup(self, params: dict[str, str]) -> Answer:
        sent = next((s for s in self.sends if s.client_ref == params.get("client_ref")), None)
        return self._ok(params, {"found": sent is not None, "message_id": sent.message_id if sent else None})

    def _media_get(self, params: dict[str, str]) -> Answer:
        media_id = params.get("media_id", "")
        self.media_gets.append(media_id)
        if self.fail_media_gets:
            failure = self.fail_media_gets.pop(0)
            if isinstance(failure, int):
                return failure, {}
            return self._error(failure, "scripted", retry_after_s=1 if failure == "THROTTLED" else None)
        if self.offline:
            return self._error("SELLER_OFFLINE", "Qianniu is not logged in", retry_after_s=5)
        if not media_id:
            return self._error("INVALID_PARAMETER", "media_id")
        if media_id not in self._media:
            return self._error("MEDIA_NOT_FOUND", "no such media, or no longer kept")
        _, mime, size = self._media[media_id]
        token = secrets.token_urlsafe(16)
        self._tokens[token] = (media_id, time.monotonic() + self.download_ttl_s)
        path = f"/media/{token}"
        return self._ok(
            params,
            {
                "size": size,
                "mime": mime,
                "download_url": self.hostile_url or (path if self.relative_urls else self.url + path),
            },
        )

    def download(self, token: str) -> tuple[int, bytes | None, bool]:
        """GET /media/<token>: the status, the bytes (None for an error) and whether to stall."""
        media_id, until = self._tokens.get(token, ("", 0.0))
        if media_id not in self._media or time.monotonic() > until:
            return 404, None, False  # an unknown or expired URL
        failure = self.fail_downloads.pop(0) if self.fail_downloads else None
        if isinstance(failure, int):
            return failure, None, False
        self.downloads.append(media_id)
        return 200, self._media[media_id][0], failure == "stall"

    @staticmethod
    def _ok(params: dict[str, str], body: dict[str, Any]) -> Answer:
        return 200, {params["method"].removeprefix("kefu.wangwang.").replace(".", "_") + "_response": body}

    def _error(self, code: str, msg: str, retry_after_s: float | None = None) -> Answer:
        self.refused.append(code)
        return 200, {"error_response": {"code": code, "msg": msg, "retry_after_s": retry_after_s}}


def _handler(bridge: FakeWangwangBridge) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            if self.path != "/router":
                status, body = 404, {}
            else:
                status, body = bridge.handle(dict(parse_qsl(raw, keep_blank_values=True)))
            answer_json(self, status, body)

        def do_GET(self) -> None:  # noqa: N802
            if not self.path.startswith("/media/"):
                return answer_json(self, 404, {})
            status, data, stall = bridge.download(self.path.removeprefix("/media/"))
            if data is None:
                return answer_json(self, status, {})
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                if bridge.content_length:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if stall:  # the headers went out, the bytes come too late
                    self.wfile.flush()
                    time.sleep(bridge.stall_s)
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # kefu stopped reading (over its limit) or gave up waiting
            return None

        def log_message(self, *args: object) -> None:
            pass

    return Handler
