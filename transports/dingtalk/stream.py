"""Receiving through DingTalk Stream mode with the official `dingtalk-stream` SDK.

A connection starts with POST /v1.0/gateway/connections/open (the app's credentials and
subscriptions, answered with an endpoint and a one-time ticket). kefu sends that request
itself, with the body the SDK's `open_connection` sends, because the SDK's call has no timeout
(a hanging gateway would leave the listener `starting` forever) and turns every error into
None (refused credentials would look like a network problem). An answer of 401/403 or one of
DingTalk's authentication codes is an authorization failure, final for the listener; a
timeout, throttling, a 5xx or the network is recoverable. Frames and ACKs are the SDK's.

kefu drives the websocket sessions itself instead of the SDK's `start()`, because that loop
reconnects forever on fixed sleeps and logs whole frames: here the listener's policy decides
about reconnects after failures, and nothing of a message, a secret or a ticket reaches a log.

Each connection runs an asyncio loop in a thread of its own. A robot message becomes a page
that `receive()` hands to the listener; its ACK goes back to DingTalk only when the listener
says the page reached the broker (and is never sent if that does not happen within
`ack_wait_s`: DingTalk then redelivers). SYSTEM pings, and pongs to kefu's own websocket
pings, are heartbeats. A SYSTEM `disconnect` is DingTalk's routine request to move to a new
connection: the connection asks for a new ticket and carries on over a new socket, so the
listener stays `running` and spends nothing of its reconnect budget; only when that fails does
the listener see a failure.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import platform
import queue
import threading
from typing import Any
from urllib.parse import quote_plus

import dingtalk_stream
import httpx
import websockets
from dingtalk_stream.frames import AckMessage, CallbackMessage, Headers, SystemMessage
from dingtalk_stream.version import VERSION_STRING

from config import DingTalkSettings
from runtime.errors import PageRejected
from runtime.ports import Heartbeat, ListenerFailure, Received
from transports.dingtalk.credentials import DingTalkCredentials
from transports.dingtalk.openapi import AUTH_FAILED, classify
from transports.dingtalk.robot import ROBOT_TOPIC, parse_robot_message, robot_page

log = logging.getLogger(__name__)

_sdk_log = logging.getLogger("kefu.dingtalk.sdk")  # the SDK's own lines (it may print responses)
_sdk_log.setLevel(logging.CRITICAL)
# websockets logs the request line (with the ticket) and every frame (with messages) at DEBUG.
logging.getLogger("websockets.client").setLevel(logging.INFO)

OPEN_PATH = "/v1.0/gateway/connections/open"
# DingTalk's codes for refused credentials, as `openapi.classify` names them (401 authFailed is
# what connections/open answers a wrong secret; the others are the OpenAPI's for the same).
AUTH_CODES = frozenset({"DINGTALK_authFailed", "DINGTALK_InvalidAuthentication", "DINGTALK_invalidClientIdOrSecret"})
OPEN_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json",
    "User-Agent": f"DingTalkStream/1.0 SDK/{VERSION_STRING} Python/{platform.python_version()}"
    " (+https://github.com/open-dingtalk/dingtalk-stream-sdk-python)",
}
PING_INTERVAL_S = 15.0
OPEN_SLACK_S = 5.0  # beyond the ticket's and the socket's own timeouts, before giving up on a thread
Event = Received | Heartbeat | ListenerFailure


def _stream_client(credentials: DingTalkCredentials) -> dingtalk_stream.DingTalkStreamClient:
    client = dingtalk_stream.DingTalkStreamClient(
        dingtalk_stream.Credential(credentials.client_id, credentials.client_secret.get_secret_value()), _sdk_log
    )
    client.register_callback_handler(ROBOT_TOPIC, dingtalk_stream.CallbackHandler())  # the subscription
    return client


def _open_request(client: dingtalk_stream.DingTalkStreamClient) -> dict[str, Any]:
    """The body the SDK's `open_connection` posts. It holds the secret: never log it."""
    return {
        "clientId": client.credential.client_id,
        "clientSecret": client.credential.client_secret,
        "subscriptions": [{"type": CallbackMessage.TYPE, "topic": topic} for topic in client.callback_handler_map],
        "ua": f"dingtalk-sdk-python/v{VERSION_STRING}-union",
        "localIp": client.get_host_ip(),
    }


async def open_ticket(http: httpx.AsyncClient, url: str, body: dict[str, Any], timeout_s: float) -> str:
    """Ask DingTalk for a one-time ticket within `timeout_s` (all of it, not per read);
    returns the websocket address to open with it. Raises ListenerFailure."""
    try:
        async with asyncio.timeout(timeout_s):
            response = await http.post(url, json=body, headers=OPEN_HEADERS)
    except (TimeoutError, httpx.TimeoutException):
        raise ListenerFailure("DINGTALK_OPEN_TIMEOUT") from None
    except httpx.HTTPError as error:  # the class only: its text may carry the address
        raise ListenerFailure(f"DINGTALK_OPEN_UNREACHABLE_{type(error).__name__}") from None
    return ticket_address(response)


def ticket_address(response: httpx.Response) -> str:
    """The websocket address in DingTalk's answer to connections/open. Refused credentials are
    final (an operator must act); throttling, a 5xx, any other refusal or a malformed answer
    is a recoverable ListenerFailure."""
    failure = classify(response)  # throttling is not-submitted, a 5xx unknown, the rest rejected
    if failure is not None:
        refused = failure.kind == "rejected" and (response.status_code in (401, 403) or failure.code in AUTH_CODES)
        raise ListenerFailure(AUTH_FAILED, authorization=True) if refused else ListenerFailure(failure.code)
    try:
        answer = response.json()
    except ValueError:
        answer = None
    endpoint, ticket = (answer.get("endpoint"), answer.get("ticket")) if isinstance(answer, dict) else (None, None)
    if not isinstance(endpoint, str) or not isinstance(ticket, str):
        raise ListenerFailure("DINGTALK_OPEN_MALFORMED")
    return f"{endpoint}?ticket={quote_plus(ticket)}"


class StreamConnection:
    """One listening connection: constructing it opens the first socket (or raises
    ListenerFailure), and DingTalk's `disconnect` requests move it to new sockets."""

    def __init__(
        self, account_id: str, client: dingtalk_stream.DingTalkStreamClient, settings: DingTalkSettings
    ) -> None:
        self._account_id = account_id
        self._client = client
        self._open_url = f"{settings.openapi_url}{OPEN_PATH}"
        self._open_body = _open_request(client)
        self._timeout_s = settings.timeout_s
        self._ack_wait_s = settings.ack_wait_s
        self._events: queue.Queue[Event] = queue.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._opened: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kefu-dingtalk-{account_id}", daemon=True)
        self._thread.start()
        self._wait_opened()

    def _wait_opened(self) -> None:
        """Return once the first socket is open; raise its failure, or give up on a session
        that outlives its own timeouts (it is closed, so it never delivers)."""
        try:
            self._opened.result(timeout=2 * self._timeout_s + OPEN_SLACK_S)
        except concurrent.futures.TimeoutError:
            self.close()
            raise ListenerFailure("DINGTALK_OPEN_TIMEOUT") from None
        except ListenerFailure:
            self.close()
            raise

    # -- the listener's side ---------------------------------------------------------------

    def receive(self, timeout_s: float) -> Received | Heartbeat | None:
        if self._closed.is_set():
            raise ListenerFailure("DINGTALK_CONNECTION_CLOSED")
        try:
            event = self._events.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if isinstance(event, ListenerFailure):
            raise event
        return event

    def close(self) -> None:
        self._closed.set()
        loop, task = self._loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)
        if threading.current_thread() is not self._thread:
            self._thread.join(5)

    # -- the sessions' side ----------------------------------------------------------------

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        try:
            async with httpx.AsyncClient(timeout=self._timeout_s) as http:
                failure = await self._sessions(http)
        except asyncio.CancelledError:  # closed by kefu
            failure = ListenerFailure("DINGTALK_CONNECTION_CLOSED")
        except Exception as error:  # e.g. a malformed SYSTEM frame in the SDK: end the connection, say which class
            log.warning("dingtalk %s: connection ended (%s)", self._account_id, type(error).__name__)
            failure = ListenerFailure(f"DINGTALK_CONNECTION_LOST_{type(error).__name__}")
        if not self._opened.done():
            self._opened.set_exception(failure)
        self._events.put(failure)

    async def _sessions(self, http: httpx.AsyncClient) -> ListenerFailure:
        """Serve one socket after another until one fails: `disconnect` is a handover to a
        socket on a new ticket, anything else ends the connection."""
        while not self._closed.is_set():
            try:
                uri = await open_ticket(http, self._open_url, self._open_body, self._timeout_s)
                await self._session(uri)
            except _Disconnect:
                log.info("dingtalk %s: DingTalk asked to reconnect; opening a new connection", self._account_id)
                continue
            except ListenerFailure as failure:
                return failure
            except TimeoutError:
                return ListenerFailure("DINGTALK_CONNECT_TIMEOUT")
            except (OSError, websockets.WebSocketException) as error:
                return ListenerFailure(f"DINGTALK_CONNECTION_LOST_{type(error).__name__}")
            return ListenerFailure("DINGTALK_CONNECTION_CLOSED_BY_PLATFORM")
        return ListenerFailure("DINGTALK_CONNECTION_CLOSED")  # closed by kefu between two sockets

    async def _session(self, uri: str) -> None:
        """One socket, until the platform closes it (returns) or asks for a new one (_Disconnect)."""
        async with websockets.connect(
            uri,
            ping_interval=None,
            max_size=4 * 1024 * 1024,
            open_timeout=self._timeout_s,
            close_timeout=self._timeout_s,
        ) as socket:
            if not self._opened.done():
                self._opened.set_result(None)
            pinger = asyncio.create_task(self._keepalive(socket))
            callbacks: set[asyncio.Task[None]] = set()
            try:
                async for raw in socket:
                    await self._frame(socket, raw, callbacks)
            finally:
                pinger.cancel()
                for task in list(callbacks):  # their ACKs cannot reach DingTalk now: it redelivers
                    task.cancel()

    async def _keepalive(self, socket: Any) -> None:
        """kefu's own websocket pings: a pong proves the platform end is alive."""
        try:
            while True:
                await asyncio.sleep(PING_INTERVAL_S)
                pong = await socket.ping()
                await asyncio.wait_for(pong, PING_INTERVAL_S)
                self._events.put(Heartbeat())
        except (TimeoutError, websockets.WebSocketException):
            return  # no more heartbeats: the listener's watchdog ends this connection

    async def _frame(self, socket: Any, raw: str | bytes, callbacks: set[asyncio.Task[None]]) -> None:
        try:
            frame = json.loads(raw)
            kind = frame.get("type")
        except (ValueError, AttributeError):
            log.warning("dingtalk %s: a frame that is not JSON was ignored", self._account_id)
            return
        if kind == SystemMessage.TYPE:
            message = SystemMessage.from_dict(frame)
            self._events.put(Heartbeat())
            ack = await self._client.system_handler.raw_process(message)  # echoes a ping's data
            await socket.send(json.dumps(ack.to_dict()))
            if message.headers.topic == SystemMessage.TOPIC_DISCONNECT:
                raise _Disconnect
        elif kind == CallbackMessage.TYPE:
            task = asyncio.create_task(self._callback(socket, frame))
            callbacks.add(task)
            task.add_done_callback(callbacks.discard)
        else:  # EVENT frames: kefu subscribes to none; acknowledge so they are not redelivered
            await socket.send(json.dumps(_ack(frame, AckMessage.STATUS_OK, None)))

    async def _callback(self, socket: Any, frame: dict[str, Any]) -> None:
        headers = frame.get("headers") or {}
        if headers.get("topic") != ROBOT_TOPIC:
            await _send_ack(socket, _ack(frame, AckMessage.STATUS_NOT_IMPLEMENT, None))
            return
        try:
            page = robot_page(self._account_id, parse_robot_message(json.loads(frame.get("data") or "")))
        except (ValueError, PageRejected) as error:
            # A malformed message never becomes valid: acknowledge it so it is not redelivered.
            problems = error.problems if isinstance(error, PageRejected) else ["data: not JSON"]
            log.warning("dingtalk %s: robot message rejected: %s", self._account_id, "; ".join(problems))
            await _send_ack(socket, _ack(frame, AckMessage.STATUS_OK, "rejected"))
            return
        loop = asyncio.get_running_loop()
        published: asyncio.Future[None] = loop.create_future()

        def settle() -> None:
            if not published.done():
                published.set_result(None)

        def ack() -> None:  # called from the listener's thread once the page is with the broker
            try:
                loop.call_soon_threadsafe(settle)
            except RuntimeError:
                pass  # the session already ended: no ACK, DingTalk redelivers, ingestion dedupes

        self._events.put(Received(page, ack=ack))
        try:
            await asyncio.wait_for(published, self._ack_wait_s)
        except TimeoutError:
            return  # no ACK: DingTalk redelivers, and ingestion dedupes
        await _send_ack(socket, _ack(frame, AckMessage.STATUS_OK, None))


class _Disconnect(Exception):
    pass


async def _send_ack(socket: Any, ack: dict[str, Any]) -> None:
    """An ACK from a callback task: if its socket is gone meanwhile, DingTalk redelivers."""
    try:
        await socket.send(json.dumps(ack))
    except websockets.ConnectionClosed:
        return


def _ack(frame: dict[str, Any], code: int, response: str | None) -> dict[str, Any]:
    ack = AckMessage()
    ack.code = code
    ack.headers.message_id = (frame.get("headers") or {}).get("messageId", "")
    ack.headers.content_type = Headers.CONTENT_TYPE_APPLICATION_JSON
    ack.message = "OK" if code == AckMessage.STATUS_OK else "not handled"
    ack.data = {"response": response}
    wire: dict[str, Any] = ack.to_dict()  # dingtalk_stream is untyped
    return wire


def open_stream(account_id: str, credentials: DingTalkCredentials, settings: DingTalkSettings) -> StreamConnection:
    """Open a listening connection: a ticket from DingTalk, then its websocket."""
    return StreamConnection(account_id, _stream_client(credentials), settings)
