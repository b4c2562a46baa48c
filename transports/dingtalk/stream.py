"""Receiving through DingTalk Stream mode with the official `dingtalk-stream` SDK.

The SDK opens the connection (`open_connection`: POST /v1.0/gateway/connections/open with the
app's credentials, answered with an endpoint and a one-time ticket), parses frames and builds
ACKs. kefu drives one websocket session per connection itself instead of the SDK's `start()`,
because that loop reconnects forever on fixed sleeps and logs whole frames: here the
listener's policy decides about reconnects, and nothing of a message reaches a log.

Each session runs an asyncio loop in a thread of its own. A robot message becomes a page that
`receive()` hands to the listener; its ACK goes back to DingTalk only when the listener says
the page reached the broker (and is never sent if that does not happen within `ack_wait_s`:
DingTalk then redelivers). SYSTEM pings, and pongs to kefu's own websocket pings, are
heartbeats; a `disconnect` frame ends the session, and the listener reconnects with a new
ticket.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
from typing import Any
from urllib.parse import quote_plus

import dingtalk_stream
import websockets
from dingtalk_stream.frames import AckMessage, CallbackMessage, Headers, SystemMessage

from config import DingTalkSettings
from runtime.errors import PageRejected
from runtime.listener_policy import ListenerFailure
from transports.base import Heartbeat, Received
from transports.dingtalk.credentials import DingTalkCredentials
from transports.dingtalk.robot import ROBOT_TOPIC, parse_robot_message, robot_page

log = logging.getLogger(__name__)

_sdk_log = logging.getLogger("kefu.dingtalk.sdk")  # the SDK's own lines (it may print responses)
_sdk_log.setLevel(logging.CRITICAL)

PING_INTERVAL_S = 15.0
Event = Received | Heartbeat | ListenerFailure


def stream_client(credentials: DingTalkCredentials, openapi_url: str) -> dingtalk_stream.DingTalkStreamClient:
    # The SDK reads its endpoint from a class attribute fixed at import; kefu's setting wins.
    dingtalk_stream.DingTalkStreamClient.OPEN_CONNECTION_API = f"{openapi_url}/v1.0/gateway/connections/open"
    client = dingtalk_stream.DingTalkStreamClient(
        dingtalk_stream.Credential(credentials.client_id, credentials.client_secret.get_secret_value()), _sdk_log
    )
    client.register_callback_handler(ROBOT_TOPIC, dingtalk_stream.CallbackHandler())  # the subscription
    return client


class StreamConnection:
    def __init__(
        self,
        account_id: str,
        client: dingtalk_stream.DingTalkStreamClient,
        ticket: dict[str, Any],
        settings: DingTalkSettings,
    ) -> None:
        self._account_id = account_id
        self._client = client
        self._uri = f"{ticket['endpoint']}?ticket={quote_plus(ticket['ticket'])}"
        self._ack_wait_s = settings.ack_wait_s
        self._events: queue.Queue[Event] = queue.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._started = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kefu-dingtalk-{account_id}", daemon=True)
        self._thread.start()
        self._started.wait(5)

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

    # -- the session's side ----------------------------------------------------------------

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._started.set()
        try:
            async with websockets.connect(self._uri, ping_interval=None, max_size=4 * 1024 * 1024) as socket:
                pinger = asyncio.create_task(self._keepalive(socket))
                try:
                    async for raw in socket:
                        await self._frame(socket, raw)
                finally:
                    pinger.cancel()
            failure = ListenerFailure("DINGTALK_CONNECTION_CLOSED_BY_PLATFORM")
        except asyncio.CancelledError:
            return  # closed by kefu
        except _Disconnect:
            failure = ListenerFailure("DINGTALK_DISCONNECT_REQUESTED")
        except (OSError, websockets.WebSocketException) as error:
            failure = ListenerFailure(f"DINGTALK_CONNECTION_LOST_{type(error).__name__}")
        self._events.put(failure)

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

    async def _frame(self, socket: Any, raw: str | bytes) -> None:
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
            asyncio.create_task(self._callback(socket, frame))
        else:  # EVENT frames: kefu subscribes to none; acknowledge so they are not redelivered
            await socket.send(json.dumps(_ack(frame, AckMessage.STATUS_OK, None)))

    async def _callback(self, socket: Any, frame: dict[str, Any]) -> None:
        headers = frame.get("headers") or {}
        if headers.get("topic") != ROBOT_TOPIC:
            await socket.send(json.dumps(_ack(frame, AckMessage.STATUS_NOT_IMPLEMENT, None)))
            return
        try:
            page = robot_page(self._account_id, parse_robot_message(json.loads(frame.get("data") or "")))
        except (ValueError, PageRejected) as error:
            # A malformed message never becomes valid: acknowledge it so it is not redelivered.
            problems = error.problems if isinstance(error, PageRejected) else ["data: not JSON"]
            log.warning("dingtalk %s: robot message rejected: %s", self._account_id, "; ".join(problems))
            await socket.send(json.dumps(_ack(frame, AckMessage.STATUS_OK, "rejected")))
            return
        loop = asyncio.get_running_loop()
        published: asyncio.Future[None] = loop.create_future()

        def ack() -> None:  # called from the listener's thread once the page is with the broker
            try:
                loop.call_soon_threadsafe(lambda: published.done() or published.set_result(None))
            except RuntimeError:
                pass  # the session already ended: no ACK, DingTalk redelivers, ingestion dedupes

        self._events.put(Received(page, ack=ack))
        try:
            await asyncio.wait_for(published, self._ack_wait_s)
        except TimeoutError:
            return  # no ACK: DingTalk redelivers, and ingestion dedupes
        await socket.send(json.dumps(_ack(frame, AckMessage.STATUS_OK, None)))


class _Disconnect(Exception):
    pass


def _ack(frame: dict[str, Any], code: int, response: str | None) -> dict[str, Any]:
    ack = AckMessage()
    ack.code = code
    ack.headers.message_id = (frame.get("headers") or {}).get("messageId", "")
    ack.headers.content_type = Headers.CONTENT_TYPE_APPLICATION_JSON
    ack.message = "OK" if code == AckMessage.STATUS_OK else "not handled"
    ack.data = {"response": response}
    return ack.to_dict()


def open_stream(account_id: str, credentials: DingTalkCredentials, settings: DingTalkSettings) -> StreamConnection:
    """Ask DingTalk for a ticket through the SDK and open the websocket session."""
    client = stream_client(credentials, settings.openapi_url)
    ticket = client.open_connection()
    if not ticket or not isinstance(ticket.get("endpoint"), str) or not isinstance(ticket.get("ticket"), str):
        raise ListenerFailure("DINGTALK_OPEN_CONNECTION_FAILED")
    return StreamConnection(account_id, client, ticket, settings)
