"""DingTalk HTTP-callback robots: an alternative receiver to Stream mode.

`POST /dingtalk/<account id>` with DingTalk's signed body. A genuine, fresh callback becomes
the same page Stream mode produces, recorded in the delivery store and published before the
200 goes back (worker.dispatch); if it cannot be recorded the answer is 503, so DingTalk
retries. Nothing of a refused request is written or logged beyond its error code.

It faces the internet, so a request costs kefu nothing before it is bounded: served by uvicorn
(asyncio: a slow client holds a socket, not a thread), a declared length of at most 1 MiB
required before a byte of the body is read, the signature headers checked next, then the body
read against a deadline and parsed (`/healthz` answers meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from runtime.accounts.credentials import CredentialsMissing, load_credentials
from runtime.accounts.registry import load_account
from runtime.errors import PageRejected
from runtime.store import DeliveryStore, now_ms
from transports.dingtalk import DingTalkCredentials
from transports.dingtalk.callback import CallbackRejected, parse_callback, verify_signature
from transports.dingtalk.robot import robot_page
from worker.dispatch import Publish

log = logging.getLogger(__name__)

MAX_BODY = 1024 * 1024
BODY_READ_S = 10.0  # the whole body, however slowly it comes
MAX_CONNECTIONS = 1000  # open at once (uvicorn answers 503 past it); each one costs a socket
Answer = tuple[int, dict[str, str]]


def _check_headers(store: DeliveryStore, account_id: str, headers: dict[str, str]) -> Answer | None:
    """A refusal of the request by its path and signature headers, or None: read its body."""
    with store.read() as conn:
        account = load_account(conn, account_id)
    if account is None or account.platform != "dingtalk":
        return 404, {"code": "KEFU_ACCOUNT_UNKNOWN"}
    try:
        secret = DingTalkCredentials.model_validate(load_credentials(store, account_id)).client_secret
        verify_signature(headers, secret.get_secret_value(), now_ms())
    except CredentialsMissing as error:
        return 503, {"code": error.code}
    except CallbackRejected as error:
        log.warning("dingtalk callback for %s refused: %s", account_id, error.code)
        return 401, {"code": error.code}
    return None


def _receive_body(publish: Publish, account_id: str, body: bytes) -> Answer:
    try:
        message = parse_callback(body)
    except CallbackRejected as error:
        log.warning("dingtalk callback for %s refused: %s", account_id, error.code)
        return 400, {"code": error.code}
    except PageRejected as error:
        log.warning("dingtalk callback for %s rejected: %s", account_id, "; ".join(error.problems))
        return 400, {"code": "DINGTALK_CALLBACK_MALFORMED"}
    try:
        publish(robot_page(account_id, message))
    except Exception as error:  # not recorded: DingTalk retries a failed callback
        log.warning("dingtalk callback for %s not received (%s)", account_id, type(error).__name__)
        return 503, {"code": "KEFU_RECEIVE_FAILED"}
    return 200, {"msgtype": "empty"}


class _TooLarge(Exception):
    pass


async def _read_body(request: Request, length: int) -> bytes:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > length:  # more than declared: not read any further
            raise _TooLarge
    return bytes(body)


def callback_app(store: DeliveryStore, publish: Publish) -> Starlette:
    async def receive(request: Request) -> JSONResponse:
        account_id = request.path_params["account_id"]
        length = request.headers.get("content-length", "")
        if not (length.isascii() and length.isdigit()):  # missing, negative, chunked or not a number
            return JSONResponse({"code": "KEFU_LENGTH_REQUIRED"}, 411)
        if int(length) > MAX_BODY:
            return JSONResponse({"code": "DINGTALK_CALLBACK_TOO_LARGE"}, 413)
        refused = await run_in_threadpool(_check_headers, store, account_id, dict(request.headers))
        if refused is not None:
            return JSONResponse(refused[1], refused[0])
        try:
            body = await asyncio.wait_for(_read_body(request, int(length)), BODY_READ_S)
        except TimeoutError:
            return JSONResponse({"code": "KEFU_BODY_TIMEOUT"}, 408)
        except _TooLarge:
            return JSONResponse({"code": "DINGTALK_CALLBACK_TOO_LARGE"}, 413)
        status, answer = await run_in_threadpool(_receive_body, publish, account_id, body)
        return JSONResponse(answer, status)

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    async def refused(request: Request, error: Any) -> JSONResponse:
        status = error.status_code if isinstance(error, HTTPException) else 400
        return JSONResponse({"code": "KEFU_CALLBACK_UNKNOWN_PATH" if status == 404 else f"KEFU_HTTP_{status}"}, status)

    routes = [Route("/dingtalk/{account_id}", receive, methods=["POST"]), Route("/healthz", healthz)]
    return Starlette(routes=routes, exception_handlers={HTTPException: refused})


def serve_callbacks(
    store: DeliveryStore, publish: Publish, host: str, port: int, on_listening: Callable[[int], None]
) -> None:
    """Serve until SIGINT or SIGTERM; `on_listening(port)` once the socket takes connections
    (port 0: any free one)."""
    listening = socket.create_server((host, port))
    on_listening(listening.getsockname()[1])
    config = uvicorn.Config(
        callback_app(store, publish),
        log_level="warning",
        limit_concurrency=MAX_CONNECTIONS,
        timeout_keep_alive=5,
        timeout_graceful_shutdown=2,
        proxy_headers=False,  # DingTalk's address as the socket saw it: no header claims another
    )
    uvicorn.Server(config).run(sockets=[listening])
