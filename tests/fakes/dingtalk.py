"""A local DingTalk: the OpenAPI over HTTP and the Stream gateway over WebSocket, on loopback.

The HTTP side issues tokens and connection tickets (or, scripted, refuses them or answers
only after a stall), takes robot sends (recorded before any scripted stall, like a platform
whose answer is lost) and answers read-status queries. Like DingTalk, batchSend takes staff ids
only: an encrypted senderId (`$:LWCP_v1:$…`) comes back in invalidStaffIdList and nothing is
sent. Each robot message carries a session webhook served here for real (`/robot/sendBySession`,
no token, until it expires); its posts are recorded in `session_posts`. The
gateway pushes robot messages as CALLBACK frames, answers nothing itself but records ACKs,
redelivers a frame not ACKed within `redeliver_after_s`, and can ping, ask the client to
disconnect, or drop the socket. Sends recorded here are the ground truth for "one reply per
buyer message".
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from websockets.asyncio.server import ServerConnection, serve

from tests.fakes.http import answer_json

ROBOT_TOPIC = "/v1.0/im/bot/messages/get"


@dataclass
class RecordedSend:
    path: str
    body: dict[str, Any]
    process_query_key: str

    @property
    def text(self) -> str:
        param = json.loads(self.body["msgParam"])
        return param.get("content") or param.get("text", "")  # sampleText, or sampleMarkdown

    @property
    def user_ids(self) -> list[str]:
        return self.body.get("userIds") or []


@dataclass
class SessionPost:
    """One reply posted to a session webhook."""

    conversation_id: str
    body: dict[str, Any]

    @property
    def text(self) -> str:
        if self.body.get("msgtype") == "markdown":
            return str(self.body["markdown"]["text"])
        return str(self.body["text"]["content"])


SENDER_ID_PREFIX = "$:LWCP_v1:$"  # DingTalk's encrypted senderId: no staff id, batchSend refuses it
SESSION_EXPIRED_ERRCODE = 300001  # a stand-in nonzero errcode for an unknown or expired session


def sender_id_of(user: str) -> str:
    """The encrypted senderId the fake gives `user` (stable per user)."""
    return SENDER_ID_PREFIX + base64.b64encode(hashlib.sha256(user.encode()).digest()[:16]).decode()


@dataclass
class Delivery:
    frame: dict[str, Any]
    sent_at: float = 0.0


@dataclass
class FakeDingTalk:
    client_id: str = "ding-app"
    client_secret: str = "ding-secret"
    robot_code: str = "ding-robot"
    redeliver_after_s: float = 1.0
    token_expires_in: int = 7200
    session_webhook_ttl_s: float = 5400.0  # DingTalk's are good for about 90 minutes
    # scripted behaviour of the next sends
    throttle_sends: int = 0  # answer 403 QpsLimit to this many
    stall_sends: int = 0  # record, then answer only after this long:
    stall_s: float = 0.0
    invalid_users: set[str] = field(default_factory=set)
    flow_controlled_users: set[str] = field(default_factory=set)
    # scripted answers of the next connections/open and accessToken requests, in turn
    open_answers: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    token_answers: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    open_stalls: int = 0  # hold this many connections/open requests for `open_stall_s` first
    open_stall_s: float = 0.0
    # what happened
    sends: list[RecordedSend] = field(default_factory=list)
    token_requests: int = 0
    tickets_issued: int = 0
    connections: int = 0  # websocket sessions opened with a valid ticket
    drop_every_connection: bool = False  # each session aborted as soon as it opens
    acks: list[str] = field(default_factory=list)  # frame message ids, in ACK order
    uploads: list[int] = field(default_factory=list)  # sizes of uploaded media bodies
    read: dict[str, dict[str, int]] = field(default_factory=dict)  # process key -> user -> read at
    read_queries: list[str] = field(default_factory=list)  # process keys asked about
    prompt_readers: set[str] = field(default_factory=set)  # users who read every message at once
    files: dict[str, bytes] = field(default_factory=dict)  # downloadCode -> what the buyer sent
    downloads: list[str] = field(default_factory=list)  # download codes fetched, in order
    session_posts: list[SessionPost] = field(default_factory=list)  # replies posted to session webhooks
    session_refusals: int = 0  # posts to an unknown or expired session webhook

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: set[str] = set()
        self._tickets: set[str] = set()
        self._keys = itertools.count(1)
        self._unacked: dict[str, Delivery] = {}
        self._sessions: dict[str, tuple[str, float]] = {}  # session -> (conversation, expiry in epoch seconds)
        self._socket: ServerConnection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._http: ThreadingHTTPServer | None = None
        self.ws_port = 0

    # -- life ------------------------------------------------------------------------------

    def start(self) -> FakeDingTalk:
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        ready = threading.Event()
        threading.Thread(target=lambda: asyncio.run(self._gateway(ready)), daemon=True).start()
        ready.wait(5)
        return self

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)

    @property
    def url(self) -> str:
        assert self._http is not None
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    # -- what a test does to the platform ---------------------------------------------------

    def buyer_says(
        self, sender: str, text: str, conversation_id: str | None = None, group: bool = False, at_robot: bool = False
    ) -> str:
        """A robot message from `sender`; returns its msgId. Delivered now if a client is connected,
        else on the next connection (DingTalk keeps it)."""
        msg_id = f"msg-{uuid.uuid4().hex[:12]}"
        conversation = conversation_id or f"cid-{sender}"
        data = {
            "conversationId": conversation,
            "conversationType": "2" if group else "1",
            "msgId": msg_id,
            "msgtype": "text",
            "text": {"content": text},
            "createAt": int(time.time() * 1000),
            "senderStaffId": sender,
            "senderId": sender_id_of(sender),
            "senderNick": f"用户{sender}",
            "isInAtList": at_robot,
            "robotCode": self.robot_code,
            "chatbotUserId": "robot-user",
            **self.session_webhook(conversation),
        }
        self.push(data)
        return msg_id

    def external_says(
        self, user: str, text: str, conversation_id: str | None = None, webhook_ttl_s: float | None = None
    ) -> str:
        """A 1:1 robot message from a user outside the organisation: a senderId and a session
        webhook, no senderStaffId. Returns its msgId."""
        msg_id = f"msg-{uuid.uuid4().hex[:12]}"
        conversation = conversation_id or f"cid-{user}"
        data = {
            "conversationId": conversation,
            "conversationType": "1",
            "msgId": msg_id,
            "msgtype": "text",
            "text": {"content": text},
            "createAt": int(time.time() * 1000),
            "senderId": sender_id_of(user),
            "senderNick": f"访客{user}",
            "robotCode": self.robot_code,
            "chatbotUserId": "robot-user",
            **self.session_webhook(conversation, webhook_ttl_s),
        }
        self.push(data)
        return msg_id

    def session_webhook(self, conversation_id: str, ttl_s: float | None = None) -> dict[str, Any]:
        """A new session webhook of the conversation, as a robot message's two fields."""
        session, expires = uuid.uuid4().hex, time.time() + (self.session_webhook_ttl_s if ttl_s is None else ttl_s)
        with self._lock:
            self._sessions[session] = (conversation_id, expires)
        return {
            "sessionWebhook": f"{self.url}/robot/sendBySession?session={session}",
            "sessionWebhookExpiredTime": int(expires * 1000),
        }

    def buyer_sends_picture(self, sender: str, data: bytes, conversation_id: str | None = None) -> str:
        """A picture message (its bytes kept under a download code); returns its msgId."""
        msg_id, code = f"msg-{uuid.uuid4().hex[:12]}", f"code-{uuid.uuid4().hex[:16]}"
        self.files[code] = data
        message = {
            "conversationId": conversation_id or f"cid-{sender}",
            "conversationType": "1",
            "msgId": msg_id,
            "msgtype": "picture",
            "content": {"downloadCode": code, "pictureDownloadCode": code},
            "createAt": int(time.time() * 1000),
            "senderStaffId": sender,
            "senderNick": f"用户{sender}",
            "robotCode": self.robot_code,
            "chatbotUserId": "robot-user",
        }
        self.push(message)
        return msg_id

    def download_url(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        code = body.get("downloadCode")
        if body.get("robotCode") != self.robot_code or code not in self.files:
            return 400, {"code": "invalidParameter.downloadCode", "message": "download code invalid"}
        self.downloads.append(code)
        return 200, {"downloadUrl": f"{self.url}/files/{code}"}

    def push(self, data: dict[str, Any], copies: int = 1) -> None:
        """Deliver robot message data as `copies` CALLBACK frames (each its own frame id)."""
        for _ in range(copies):
            frame = {
                "specVersion": "1.0",
                "type": "CALLBACK",
                "headers": {
                    "topic": ROBOT_TOPIC,
                    "messageId": f"frame-{uuid.uuid4().hex[:12]}",
                    "contentType": "application/json",
                    "time": str(int(time.time() * 1000)),
                },
                "data": json.dumps(data, ensure_ascii=False),
            }
            with self._lock:
                self._unacked[frame["headers"]["messageId"]] = Delivery(frame)
        self._call(self._flush)

    def push_raw(self, frame: Any) -> None:
        self._call(lambda: self._send(frame))

    def ping(self) -> None:
        self._system("ping", {"opaque": uuid.uuid4().hex})

    def ask_disconnect(self) -> None:
        self._system("disconnect", {"reason": "server maintenance"})

    def drop(self) -> None:
        """Kill the socket without a closing handshake (a dead network path)."""

        def abort() -> None:
            if self._socket is not None:
                self._socket.transport.abort()

        self._call(abort)

    def revoke_tokens(self) -> None:
        with self._lock:
            self._tokens.clear()

    def mark_read(self, process_query_key: str, user_id: str) -> None:
        self.read.setdefault(process_query_key, {})[user_id] = int(time.time() * 1000)

    @property
    def connected(self) -> bool:
        return self._socket is not None

    @property
    def unacked(self) -> int:
        with self._lock:
            return len(self._unacked)

    # -- the gateway -----------------------------------------------------------------------

    async def _gateway(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        async with serve(self._connection, "127.0.0.1", 0) as server:
            self.ws_port = server.sockets[0].getsockname()[1]
            ready.set()
            redeliver = asyncio.create_task(self._redeliver())
            await self._stopping.wait()
            redeliver.cancel()

    async def _connection(self, socket: ServerConnection) -> None:
        ticket = parse_qs(urlparse(socket.request.path).query).get("ticket", [""])[0]
        with self._lock:
            valid = ticket in self._tickets
            self._tickets.discard(ticket)  # a ticket opens one connection
        if not valid:
            await socket.close(4001, "invalid ticket")
            return
        previous, self._socket = self._socket, socket
        self.connections += 1
        if self.drop_every_connection:  # a flapping path: each connection opens, then dies at once
            self._socket = None
            socket.transport.abort()
            return
        if previous is not None:
            previous.transport.abort()
        with self._lock:
            for delivery in self._unacked.values():
                delivery.sent_at = 0.0  # a new connection gets what is still un-ACKed
        self._flush()
        try:
            async for raw in socket:
                ack = json.loads(raw)
                frame_id = (ack.get("headers") or {}).get("messageId", "")
                with self._lock:
                    if self._unacked.pop(frame_id, None) is not None and ack.get("code") == 200:
                        self.acks.append(frame_id)
        except Exception:
            pass
        finally:
            if self._socket is socket:
                self._socket = None

    def _flush(self) -> None:
        now = time.monotonic()
        with self._lock:
            due = [d for d in self._unacked.values() if d.sent_at == 0.0]
            for delivery in due:
                delivery.sent_at = now
        for delivery in due:
            self._send(delivery.frame)

    async def _redeliver(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            now = time.monotonic()
            with self._lock:
                late = [d for d in self._unacked.values() if d.sent_at and now - d.sent_at > self.redeliver_after_s]
                for delivery in late:
                    delivery.sent_at = now
            for delivery in late:
                self._send(delivery.frame)

    def _send(self, frame: dict[str, Any]) -> None:
        if self._socket is not None:
            asyncio.ensure_future(self._socket.send(json.dumps(frame, ensure_ascii=False)))

    def _system(self, topic: str, data: dict[str, Any]) -> None:
        frame = {
            "specVersion": "1.0",
            "type": "SYSTEM",
            "headers": {"topic": topic, "messageId": f"sys-{uuid.uuid4().hex[:8]}", "contentType": "application/json"},
            "data": json.dumps(data),
        }
        self.push_raw(frame)

    def _call(self, fn: Any) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(fn)

    # -- the OpenAPI -----------------------------------------------------------------------

    def issue_ticket(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            stall, self.open_stalls = self.open_stalls > 0, max(self.open_stalls - 1, 0)
            scripted = self.open_answers.pop(0) if self.open_answers else None
        if stall:
            time.sleep(self.open_stall_s)  # a hanging gateway: the client gives up first
        if scripted is not None:
            return scripted
        if (body.get("clientId"), body.get("clientSecret")) != (self.client_id, self.client_secret):
            return 401, {"code": "InvalidAuthentication", "message": "bad client credentials"}
        ticket = uuid.uuid4().hex
        with self._lock:
            self._tickets.add(ticket)
            self.tickets_issued += 1
        return 200, {"endpoint": f"ws://127.0.0.1:{self.ws_port}/connect", "ticket": ticket}

    def issue_token(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.token_requests += 1
        if self.token_answers:
            return self.token_answers.pop(0)
        if (body.get("appKey"), body.get("appSecret")) != (self.client_id, self.client_secret):
            return 400, {"code": "invalidClientIdOrSecret", "message": "无效的clientId或者clientSecret"}
        token = uuid.uuid4().hex
        with self._lock:
            self._tokens.add(token)
        return 200, {"accessToken": token, "expireIn": self.token_expires_in}

    def authorised(self, token: str | None) -> bool:
        with self._lock:
            return token in self._tokens

    def robot_send(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if body.get("robotCode") != self.robot_code:
            return 400, {"code": "robot.not.exist", "message": "robot does not exist"}
        if self.throttle_sends:
            self.throttle_sends -= 1
            return 403, {"code": "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi", "message": "qps limit"}
        key = f"pqk-{next(self._keys)}"
        users = body.get("userIds") or []
        invalid = [u for u in users if u in self.invalid_users or str(u).startswith(SENDER_ID_PREFIX)]
        limited = [u for u in users if u in self.flow_controlled_users]
        if len(invalid) + len(limited) < len(users) or not users:
            self.sends.append(RecordedSend(path, body, key))
        if self.stall_sends:
            self.stall_sends -= 1
            time.sleep(self.stall_s)  # recorded: only the answer is late
        answer: dict[str, Any] = {"processQueryKey": key}
        if path.endswith("batchSend"):
            answer |= {"invalidStaffIdList": invalid, "flowControlledStaffIdList": limited}
        return 200, answer

    def session_post(self, session: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """A reply posted to a session webhook: taken while the session lives (no token needed)."""
        with self._lock:
            conversation, expires = self._sessions.get(session, ("", 0.0))
        if expires <= time.time():
            self.session_refusals += 1
            return 200, {"errcode": SESSION_EXPIRED_ERRCODE, "errmsg": "session webhook expired or unknown"}
        kind = body.get("msgtype")
        part = body.get(kind) if isinstance(kind, str) else None
        if kind not in ("text", "markdown") or not isinstance(part, dict):
            return 200, {"errcode": 40035, "errmsg": "msgtype invalid"}
        if (kind == "text" and not part.get("content")) or (kind == "markdown" and not part.get("text")):
            return 200, {"errcode": 40035, "errmsg": "content missing"}
        self.session_posts.append(SessionPost(conversation, body))
        return 200, {"errcode": 0, "errmsg": "ok"}

    def read_status(self, key: str) -> tuple[int, dict[str, Any]]:
        self.read_queries.append(key)
        sent = next((s for s in self.sends if s.process_query_key == key), None)
        if sent is None:
            return 400, {"code": "invalidParameter.processQueryKey", "message": "unknown key"}
        readers = self.read.get(key, {}) | {u: int(time.time() * 1000) for u in self.prompt_readers}
        infos = [
            {"userId": u, "readStatus": "READ" if u in readers else "UNREAD", "readTimestamp": readers.get(u, 0)}
            for u in sent.user_ids
        ]
        return 200, {"sendStatus": "SUCCESS", "messageReadInfoList": infos}


def _handler(fake: FakeDingTalk) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            url = urlparse(self.path)
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if url.path == "/media/upload":
                token = parse_qs(url.query).get("access_token", [""])[0]
                if not fake.authorised(token):
                    return self._answer(200, {"errcode": 40014, "errmsg": "invalid access_token"})
                fake.uploads.append(len(raw))
                return self._answer(200, {"errcode": 0, "media_id": f"@media-{len(fake.uploads)}", "type": "image"})
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                return self._answer(400, {"code": "invalidParameter", "message": "body is not JSON"})
            if url.path == "/v1.0/gateway/connections/open":
                return self._answer(*fake.issue_ticket(body))
            if url.path == "/v1.0/oauth2/accessToken":
                return self._answer(*fake.issue_token(body))
            if url.path == "/robot/sendBySession":  # the URL is the credential: no token
                return self._answer(*fake.session_post(parse_qs(url.query).get("session", [""])[0], body))
            if not fake.authorised(self.headers.get("x-acs-dingtalk-access-token")):
                return self._answer(401, {"code": "InvalidAuthentication", "message": "token invalid"})
            if url.path in ("/v1.0/robot/oToMessages/batchSend", "/v1.0/robot/groupMessages/send"):
                return self._answer(*fake.robot_send(url.path, body))
            if url.path == "/v1.0/robot/messageFiles/download":
                return self._answer(*fake.download_url(body))
            self._answer(404, {"code": "notFound", "message": url.path})

        def do_GET(self) -> None:  # noqa: N802
            url = urlparse(self.path)
            if url.path.startswith("/files/"):  # the short-lived download URL: no token needed
                data = fake.files.get(url.path.removeprefix("/files/"))
                if data is None:
                    return self._answer(404, {"code": "notFound", "message": "expired"})
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return None
            if not fake.authorised(self.headers.get("x-acs-dingtalk-access-token")):
                return self._answer(401, {"code": "InvalidAuthentication", "message": "token invalid"})
            if url.path == "/v1.0/robot/oToMessages/readStatus":
                return self._answer(*fake.read_status(parse_qs(url.query).get("processQueryKey", [""])[0]))
            self._answer(404, {"code": "notFound", "message": url.path})

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            answer_json(self, status, body)

        def log_message(self, *args: object) -> None:
            pass

    return Handler
