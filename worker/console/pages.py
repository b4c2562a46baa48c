"""The console's pages: sign-in, the conversations list, a conversation (with its live event
stream and its buyers' images), the ops page, and the probes. Each reads through runtime."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator
from typing import Literal

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response, StreamingResponse

from runtime.accounts.registry import list_accounts
from runtime.customers.summaries import display_name, list_customers
from runtime.customers.transcript import transcript, transcript_version
from runtime.inbound.checkpoints import checkpoint_views
from runtime.inbound.input_pause import input_pauses
from runtime.inbound.media import buyer_image
from runtime.operators.accounts import Role, authenticate, sign_out
from runtime.operators.alerts import backlog
from runtime.outbox.requests import list_requests
from runtime.store import now_ms, queries
from runtime.store.states import OutboxState
from worker.console.auth import check_csrf, require, sign_in, signed_in
from worker.console.context import console_of, read_form

LIVE_POLL_S = 0.5
STREAM_FOR_S = 25  # a stream ends after this and the browser reconnects: no stream outlives a shutdown long
PAGE_ROWS = 50


def login_page(request: Request) -> Response:
    return console_of(request).page(request, "login.html", None, error=None)


async def login(request: Request) -> Response:
    console = console_of(request)
    form = await read_form(request)
    check_csrf(request, form.get("csrf"))
    name, password = str(form.get("name", "")), str(form.get("password", ""))
    attempt = console.throttle.begin(name, request.client.host if request.client else "-")
    operator = await run_in_threadpool(authenticate, console.store, name, password)
    if operator is None:
        return console.page(request, "login.html", None, error="unknown operator or wrong password")
    console.throttle.succeeded(attempt)
    sign_in(request, operator)
    return RedirectResponse("/", status_code=303)


async def logout(request: Request) -> Response:
    """Ends every session of the operator (signed in before now), in this browser and in any
    other that holds a copy of a cookie."""
    store = console_of(request).store
    form = await read_form(request)
    check_csrf(request, form.get("csrf"))
    operator = signed_in(request, store)
    if operator is not None:
        await run_in_threadpool(sign_out, store, operator.name, now_ms())
    request.session.clear()
    return RedirectResponse("/login", status_code=303)


def conversations(request: Request) -> Response:
    console = console_of(request)
    operator = signed_in(request, console.store)
    if operator is None:
        return RedirectResponse("/login", status_code=303)
    source: Literal["real", "simulation"] = (
        "simulation" if request.query_params.get("source") == "simulation" else "real"
    )
    search = request.query_params.get("q") or None
    before = request.query_params.get("before") or None
    rows = list_customers(
        console.store, source, search=search, limit=PAGE_ROWS + 1, reader=operator.name, before=before
    )
    more = len(rows) > PAGE_ROWS
    rows = rows[:PAGE_ROWS]
    next_cursor = rows[-1].cursor if more else None
    return console.page(
        request, "conversations.html", operator, rows=rows, source=source, search=search or "", next_cursor=next_cursor
    )


def conversation(request: Request) -> Response:
    console = console_of(request)
    operator = signed_in(request, console.store)
    if operator is None:
        return RedirectResponse("/login", status_code=303)
    customer_id = int(request.path_params["customer_id"])
    customer = console.customer(customer_id)
    return console.page(
        request,
        "conversation.html",
        operator,
        customer=customer,
        name=display_name(console.store, customer_id) or customer.conversation_id,
        lines=transcript(console.store, customer_id, sessions_dir=console.runtime.settings.sessions_dir).lines,
        memory=console.memory.notes(customer_id),
        request_id=f"console-{int(time.time())}-{secrets.token_hex(4)}",  # kept by a resubmitted form
    )


async def events(request: Request) -> Response:
    """The conversation's transcript again whenever it changes, as server-sent events."""
    console = console_of(request)
    operator = require(await run_in_threadpool(signed_in, request, console.store), Role.VIEWER)
    customer_id = int(request.path_params["customer_id"])
    await run_in_threadpool(console.customer, customer_id)  # 404 for no such customer
    slot = console.streams.take(f"{operator.name}\0{request.session.get('since')}")  # or 429

    async def stream() -> AsyncIterator[str]:
        with console.streams.holding(slot):
            seen: tuple[object, ...] | None = None
            ends = time.monotonic() + STREAM_FOR_S  # the reconnect signs in again: a disabled operator stops
            yield "retry: 500\n\n"
            while time.monotonic() < ends and not await request.is_disconnected():
                version = await run_in_threadpool(transcript_version, console.store, customer_id)
                if version != seen:
                    seen = version
                    html = await run_in_threadpool(console.live_fragment, customer_id)
                    yield f"event: transcript\ndata: {json.dumps(html)}\n\n"
                await asyncio.sleep(LIVE_POLL_S)

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


def image(request: Request) -> Response:
    store = console_of(request).store
    require(signed_in(request, store), Role.VIEWER)
    found = buyer_image(store, int(request.path_params["customer_id"]), request.path_params["sha256"])
    if found is None:
        raise HTTPException(404, "no such image in this conversation")
    mime, data = found
    headers = {"Cache-Control": "private, max-age=86400", "X-Content-Type-Options": "nosniff"}
    return Response(data, media_type=mime, headers=headers)


def ops(request: Request) -> Response:
    console = console_of(request)
    store = console.store
    operator = signed_in(request, store)
    if operator is None:
        return RedirectResponse("/login", status_code=303)
    return console.page(
        request,
        "ops.html",
        operator,
        accounts=list_accounts(store),
        handoffs=list_customers(store, "real", paused=True, limit=200, reader=operator.name)
        + list_customers(store, "simulation", paused=True, limit=200, reader=operator.name),
        unknown=list_requests(store, OutboxState.RESULT_UNKNOWN, limit=200),
        failed=list_requests(store, OutboxState.FAILED, limit=200),
        checkpoints=checkpoint_views(store),
        pauses=input_pauses(store),
        alerts=backlog(store),
        alert_sink="a webhook" if console.runtime.settings.alerts.webhook_url is not None else "the worker log",
    )


def healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


def readyz(request: Request) -> Response:
    """Ready when the shard's store answers a read."""
    try:
        with console_of(request).store.read() as conn:
            conn.execute(queries.account.PROBE).first()
    except Exception as error:
        return PlainTextResponse(f"KEFU_STORE_UNAVAILABLE: {type(error).__name__}", 503)
    return PlainTextResponse("ready")


def metrics(request: Request) -> Response:
    return Response(generate_latest(console_of(request).registry), media_type=CONTENT_TYPE_LATEST)
