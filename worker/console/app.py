"""The console's pages and actions. Pages read through runtime (customers, transcript); actions
go through the same runtime functions as the CLI (runtime.admission.handling, runtime.outbox.manual,
runtime.outbox.requests) and are recorded with the operator's name (runtime.operators.accounts). Simulation
instances have a page of their own (worker.console.simulations).

A conversation page follows the store live: its event stream pushes the transcript again
whenever the conversation changes (a new line, a send's new state, a take-over)."""

from __future__ import annotations

import asyncio
import json
import secrets
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.convertors import IntegerConvertor, register_url_convertor
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from runtime import pipeline
from runtime.accounts.registry import list_accounts
from runtime.admission.batches import load_customer
from runtime.admission.handling import pause_handling, resume_handling
from runtime.customers.outside_text import visible
from runtime.customers.summaries import ack_customer_read, display_name, list_customers
from runtime.customers.transcript import transcript, transcript_version
from runtime.errors import KefuError
from runtime.inbound.checkpoints import checkpoint_views
from runtime.inbound.input_pause import input_pauses, pause_input
from runtime.inbound.media import buyer_image
from runtime.memory.engine import scope_of
from runtime.memory.recall import folders_recalled
from runtime.memory.store import Folder, MemoryStore
from runtime.operators.accounts import Operator, Role, authenticate, record_action, sign_out
from runtime.operators.alerts import backlog
from runtime.operators.status import notices
from runtime.outbox.manual import message_parts, retry_manual, send_manual_parts
from runtime.outbox.media import check_media_size
from runtime.outbox.requests import confirm_result, list_requests
from runtime.store import now_ms
from runtime.store.sql import sql
from runtime.store.states import OutboxState
from runtime.store.tables import Customer
from worker.console.auth import SignInThrottle, check_csrf, csrf_token, require, session_secret, sign_in, signed_in
from worker.console.headers import SecurityHeaders
from worker.console.metrics import registry_for
from worker.console.simulations import simulation_routes
from worker.console.streams import StreamSlots
from worker.context import WorkerRuntime


class _IdConvertor(IntegerConvertor):
    """A store id in a path: at most 18 digits, within SQLite's integers, so a longer one is no
    page (404) rather than an overflow."""

    regex = "[0-9]{1,18}"


register_url_convertor("id", _IdConvertor())

HERE = Path(__file__).parent
LIVE_POLL_S = 0.5
FORM_MAX_BYTES = 64 * 1024  # a form's fields (a message is at most 4,000 characters); a file comes on top
STREAM_FOR_S = 25  # a stream ends after this and the browser reconnects: no stream outlives a shutdown long


def shown(value: object) -> object:
    """Names, titles and lines from outside with their bidi overrides and zero-width characters
    visible (`\\u202e`): a buyer cannot pass for another on an operator's screen."""
    return visible(value) if type(value) is str else value


def create_app(runtime: WorkerRuntime, dispatch: Callable[[pipeline.FollowUp], object] | None = None) -> Starlette:
    """The console over `runtime`'s shard. `dispatch` hands a send's follow-up work (a receipt
    query, a later attempt) to the workers; None leaves it to their reconciler."""
    store, zone, sessions = runtime.store, runtime.settings.zone, runtime.settings.sessions_dir
    max_file = runtime.settings.media_max_bytes
    hand_on = dispatch or (lambda work: None)  # no workers to hand to: their reconciler finds the work
    throttle = SignInThrottle()
    streams = StreamSlots()
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.finalize = shown  # every value a page prints, before it is escaped
    templates.env.filters["when"] = lambda ms: (
        datetime.fromtimestamp(ms / 1000, tz=UTC).astimezone(zone).strftime("%Y-%m-%d %H:%M:%S")
    )

    def page(request: Request, template: str, operator: Operator | None, **context: Any) -> Response:
        context |= {"operator": operator, "csrf": csrf_token(request)}
        if operator is not None:
            context["notices"] = notices(store)
        return templates.TemplateResponse(request, template, context)

    memory = _MemoryReader(runtime.settings.memory_path)

    def live_fragment(customer_id: int) -> str:
        return templates.get_template("_live.html").render(
            customer=_customer(runtime, customer_id), lines=transcript(store, customer_id, sessions_dir=sessions).lines
        )

    async def act(request: Request, role: Role, max_bytes: int = FORM_MAX_BYTES) -> tuple[Operator, FormData]:
        """Who acts (from the cookie alone: nobody's form is read before that), then the form."""
        operator = require(await run_in_threadpool(signed_in, request, store), role)
        form = await read_form(request, max_bytes)
        check_csrf(request, form.get("csrf"))
        return operator, form

    # -- pages --------------------------------------------------------------------------------

    def login_page(request: Request) -> Response:
        return page(request, "login.html", None, error=None)

    async def login(request: Request) -> Response:
        form = await read_form(request)
        check_csrf(request, form.get("csrf"))
        name, password = str(form.get("name", "")), str(form.get("password", ""))
        attempt = throttle.begin(name, request.client.host if request.client else "-")
        operator = await run_in_threadpool(authenticate, store, name, password)
        if operator is None:
            return page(request, "login.html", None, error="unknown operator or wrong password")
        throttle.succeeded(attempt)
        sign_in(request, operator)
        return RedirectResponse("/", status_code=303)

    async def logout(request: Request) -> Response:
        """Ends every session of the operator (signed in before now), in this browser and in
        any other that holds a copy of a cookie."""
        form = await read_form(request)
        check_csrf(request, form.get("csrf"))
        operator = signed_in(request, store)
        if operator is not None:
            await run_in_threadpool(sign_out, store, operator.name, now_ms())
        request.session.clear()
        return RedirectResponse("/login", status_code=303)

    def conversations(request: Request) -> Response:
        operator = signed_in(request, store)
        if operator is None:
            return RedirectResponse("/login", status_code=303)
        source: Literal["real", "simulation"] = (
            "simulation" if request.query_params.get("source") == "simulation" else "real"
        )
        search = request.query_params.get("q") or None
        before = request.query_params.get("before") or None
        limit = 50
        rows = list_customers(store, source, search=search, limit=limit + 1, reader=operator.name, before=before)
        more = len(rows) > limit
        rows = rows[:limit]
        return page(
            request,
            "conversations.html",
            operator,
            rows=rows,
            source=source,
            search=search or "",
            next_cursor=rows[-1].cursor if more else None,
        )

    def conversation(request: Request) -> Response:
        operator = signed_in(request, store)
        if operator is None:
            return RedirectResponse("/login", status_code=303)
        customer_id = int(request.path_params["customer_id"])
        customer = _customer(runtime, customer_id)
        return page(
            request,
            "conversation.html",
            operator,
            customer=customer,
            name=display_name(store, customer_id) or customer.conversation_id,
            lines=transcript(store, customer_id, sessions_dir=sessions).lines,
            memory=memory.notes(customer_id),
            request_id=f"console-{int(time.time())}-{secrets.token_hex(4)}",  # kept by a resubmitted form
        )

    async def events(request: Request) -> Response:
        operator = require(await run_in_threadpool(signed_in, request, store), Role.VIEWER)
        customer_id = int(request.path_params["customer_id"])
        await run_in_threadpool(_customer, runtime, customer_id)  # 404 for no such customer
        slot = streams.take(f"{operator.name}\0{request.session.get('since')}")  # or 429

        async def stream() -> AsyncIterator[str]:
            with streams.holding(slot):
                seen: tuple[object, ...] | None = None
                ends = time.monotonic() + STREAM_FOR_S  # the reconnect signs in again: a disabled operator stops
                yield "retry: 500\n\n"
                while time.monotonic() < ends and not await request.is_disconnected():
                    version = await run_in_threadpool(transcript_version, store, customer_id)
                    if version != seen:
                        seen = version
                        html = await run_in_threadpool(live_fragment, customer_id)
                        yield f"event: transcript\ndata: {json.dumps(html)}\n\n"
                    await asyncio.sleep(LIVE_POLL_S)

        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    def image(request: Request) -> Response:
        require(signed_in(request, store), Role.VIEWER)
        found = buyer_image(store, int(request.path_params["customer_id"]), request.path_params["sha256"])
        if found is None:
            raise HTTPException(404, "no such image in this conversation")
        mime, data = found
        headers = {"Cache-Control": "private, max-age=86400", "X-Content-Type-Options": "nosniff"}
        return Response(data, media_type=mime, headers=headers)

    # -- actions ------------------------------------------------------------------------------

    def back(customer_id: int) -> Response:
        return RedirectResponse(f"/c/{customer_id}", status_code=303)

    async def take_over(request: Request) -> Response:
        operator, form = await act(request, Role.OPERATOR)
        customer_id = int(request.path_params["customer_id"])
        reason = str(form.get("reason") or "").strip() or "taken over"
        await run_in_threadpool(pause_handling, store, customer_id, f"{reason} (by {operator.name})")
        await run_in_threadpool(record_action, store, operator.name, "take-over", customer_id, None, reason)
        return back(customer_id)

    async def hand_back(request: Request) -> Response:
        operator, _ = await act(request, Role.OPERATOR)
        customer_id = int(request.path_params["customer_id"])
        await run_in_threadpool(resume_handling, store, customer_id)
        await run_in_threadpool(record_action, store, operator.name, "hand-back", customer_id)
        return back(customer_id)

    async def send(request: Request) -> Response:
        """Text, a file, or a file then its text (one request each, sent in that order)."""
        operator, form = await act(request, Role.OPERATOR, max_file + FORM_MAX_BYTES)
        customer_id = int(request.path_params["customer_id"])
        request_id, text = str(form.get("request_id", "")), str(form.get("text", "")).strip() or None
        attached = None
        upload = form.get("file")
        if isinstance(upload, UploadFile) and upload.filename:
            attached = await upload.read(), upload.filename  # at most the form's length, checked before it was read
            await form.close()
            check_media_size(upload.filename, len(attached[0]), max_file)
        parts = message_parts(request_id, customer_id, text, attached, operator.name)
        registered = await run_in_threadpool(send_manual_parts, store, parts)
        for part in registered:
            await run_in_threadpool(record_action, store, operator.name, "send", customer_id, part.request_id)
        await run_in_threadpool(_deliver, runtime, [part.request_id for part in registered], hand_on)
        return back(customer_id)

    async def confirm(request: Request) -> Response:
        operator, form = await act(request, Role.OPERATOR)
        request_id, delivered = request.path_params["request_id"], form.get("delivered") == "yes"
        settled = await run_in_threadpool(confirm_result, store, request_id, delivered)
        detail = "delivered" if delivered else "not delivered"
        await run_in_threadpool(record_action, store, operator.name, "confirm", settled.customer_id, request_id, detail)
        return back(settled.customer_id)

    async def retry(request: Request) -> Response:
        operator, form = await act(request, Role.OPERATOR)
        previous, new_id = request.path_params["request_id"], str(form.get("request_id", ""))
        retried = await run_in_threadpool(retry_manual, store, new_id, previous, operator.name)
        await run_in_threadpool(record_action, store, operator.name, "retry", retried.customer_id, new_id, previous)
        await run_in_threadpool(_deliver, runtime, [new_id], hand_on)
        return back(retried.customer_id)

    async def mark_read(request: Request) -> Response:
        operator, _ = await act(request, Role.VIEWER)
        customer_id = int(request.path_params["customer_id"])
        await run_in_threadpool(ack_customer_read, store, customer_id, operator.name)
        return back(customer_id)

    def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    def readyz(request: Request) -> Response:
        """Ready when the shard's store answers a read."""
        try:
            with store.read() as conn:
                conn.execute(sql("SELECT 1 FROM account LIMIT 1")).first()
        except Exception as error:
            return PlainTextResponse(f"KEFU_STORE_UNAVAILABLE: {type(error).__name__}", 503)
        return PlainTextResponse("ready")

    def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    def ops(request: Request) -> Response:
        operator = signed_in(request, store)
        if operator is None:
            return RedirectResponse("/login", status_code=303)
        return page(
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
            alert_sink="a webhook" if runtime.settings.alerts.webhook_url is not None else "the worker log",
        )

    async def input_pause(request: Request) -> Response:
        """Hold new pages (they are kept, not lost) for the host or one account."""
        operator, form = await act(request, Role.ADMIN)
        account = str(form.get("account") or "") or None
        await run_in_threadpool(pause_input, store, account)
        await run_in_threadpool(record_action, store, operator.name, "pause-input", None, None, account or "host")
        return RedirectResponse("/ops", status_code=303)

    async def input_resume(request: Request) -> Response:
        """Take in pages again: what was held is ingested, what was kept from admission admitted."""
        operator, form = await act(request, Role.ADMIN)
        account = str(form.get("account") or "") or None
        resumed = await run_in_threadpool(pipeline.resume, store, account)
        await run_in_threadpool(record_action, store, operator.name, "resume-input", None, None, account or "host")
        for work in resumed.follow_ups:
            await run_in_threadpool(hand_on, work)
        return RedirectResponse("/ops", status_code=303)

    async def refused(request: Request, error: Exception) -> Response:
        """One answer for every refusal: bad input (a KefuError, a ManualSend that does not
        validate) is a 400 naming its code; sign-in and role refusals come as HTTPException."""
        if isinstance(error, KefuError | ValidationError):
            error = HTTPException(400, _problem(error))
        assert isinstance(error, HTTPException)
        if error.status_code == 401:
            return RedirectResponse("/login", status_code=303)
        return HTMLResponse(templates.get_template("error.html").render(detail=error.detail), error.status_code)

    routes = [
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/", conversations),
        Route("/c/{customer_id:id}", conversation),
        Route("/c/{customer_id:id}/events", events),
        Route("/c/{customer_id:id}/image/{sha256}", image),
        Route("/c/{customer_id:id}/take-over", take_over, methods=["POST"]),
        Route("/c/{customer_id:id}/hand-back", hand_back, methods=["POST"]),
        Route("/c/{customer_id:id}/send", send, methods=["POST"]),
        Route("/c/{customer_id:id}/read", mark_read, methods=["POST"]),
        Route("/outbox/{request_id}/confirm", confirm, methods=["POST"]),
        Route("/outbox/{request_id}/retry", retry, methods=["POST"]),
        Route("/ops", ops),
        Route("/ops/input/pause", input_pause, methods=["POST"]),
        Route("/ops/input/resume", input_resume, methods=["POST"]),
        *simulation_routes(store, runtime.settings.simulator_path, page, act, hand_on),
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    registry = registry_for(store, runtime.settings)
    secret = session_secret(runtime.settings.data_dir)
    middleware = [
        Middleware(SecurityHeaders),
        Middleware(
            SessionMiddleware,
            secret_key=secret,
            same_site="strict",
            session_cookie="kefu_console",
            https_only=runtime.settings.console.secure_cookies,
        ),
    ]
    return Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={HTTPException: refused, KefuError: refused, ValidationError: refused},
    )


async def read_form(request: Request, max_bytes: int = FORM_MAX_BYTES) -> FormData:
    """The form, refused unread when its declared length is over `max_bytes` (the server never
    reads past a declared length), with at most one file: an oversized upload never reaches disk."""
    length = request.headers.get("content-length", "")
    if not (length.isascii() and length.isdigit()):
        raise HTTPException(411, "KEFU_LENGTH_REQUIRED: send the form with its Content-Length")
    if int(length) > max_bytes:
        raise HTTPException(413, f"KEFU_REQUEST_TOO_LARGE: the form is {length} bytes; the limit is {max_bytes}")
    return await request.form(max_files=1, max_fields=16)


def _customer(runtime: WorkerRuntime, customer_id: int) -> Customer:
    with runtime.store.read() as conn:
        customer = load_customer(conn, customer_id)
    if customer is None:
        raise HTTPException(404, f"KEFU_CUSTOMER_UNKNOWN: no customer {customer_id}")
    return customer


def _problem(error: Exception) -> str:
    if isinstance(error, KefuError):
        return f"{error.code}: {error.message}"
    if isinstance(error, ValidationError):
        return "KEFU_INVALID_INPUT: " + "; ".join(str(e["msg"]) for e in error.errors())
    return f"KEFU_INVALID_INPUT: {error}"


def _deliver(runtime: WorkerRuntime, request_ids: list[str], hand_on: Callable[[pipeline.FollowUp], object]) -> None:
    """Attempt registered manual sends now, in order, as the CLI's `kefu send` does; what
    follows (a receipt query, a part that waits its turn) goes to the workers. A resubmitted
    form finds them settled: nothing is sent again."""
    for _, step in pipeline.deliver_in_order(runtime, request_ids):
        for work in step.follow_ups:
            hand_on(work)


class _MemoryReader:
    """What the memory engine archived about a buyer, for the conversation page: a side panel,
    so a memory store that is missing, damaged or busy says so there, never fails the page."""

    def __init__(self, path: Path) -> None:
        self.path, self.opening = path, threading.Lock()
        self.store: MemoryStore | None = None

    def notes(self, customer_id: int) -> list[tuple[Folder, bool]] | str:
        try:
            with self.opening:
                if self.store is None:
                    if not self.path.exists():
                        return []
                    self.store = MemoryStore(self.path)
            return folders_recalled(self.store, scope_of(customer_id))
        except KefuError as error:
            return error.code
        except sqlite3.Error as error:
            return f"KEFU_MEMORY_STORE_BUSY: {type(error).__name__}"
