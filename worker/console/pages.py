"""The console's pages: sign-in, the conversations list, a conversation (with its live event
stream and its buyers' images), the ops page, and the probes. Each reads through runtime."""

from __future__ import annotations

import json
import secrets
import time
from urllib.parse import urlencode

from markupsafe import Markup
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from runtime.accounts.registry import list_accounts
from runtime.admission.routes import list_routes, observing_route
from runtime.agent.profiles import unknown_profile_routes
from runtime.customers.summaries import (
    SOURCES,
    CustomerSummary,
    Source,
    View,
    attention,
    display_name,
    list_customers,
    parse_status,
    parse_view,
)
from runtime.customers.transcript import transcript_version
from runtime.inbound.checkpoints import checkpoint_views
from runtime.inbound.input_pause import input_pauses
from runtime.inbound.media import buyer_image
from runtime.operators.accounts import Operator, Role, authenticate, sign_out
from runtime.operators.alerts import backlog
from runtime.outbox.requests import list_requests
from runtime.store import now_ms, queries
from runtime.store.states import ConversationStatus, OutboxState
from worker.console.auth import check_csrf, csrf_token, require, sign_in, signed_in
from worker.console.context import Console, console_of, read_form
from worker.console.live import live_stream, seen_param
from worker.console.metrics import scrape

PAGE_ROWS = 50
WAITING = ConversationStatus.WAITING


def login_page(request: Request) -> Response:
    return console_of(request).page(request, "login.html", None, error=False)


async def login(request: Request) -> Response:
    console = console_of(request)
    form = await read_form(request)
    check_csrf(request, form.get("csrf"))
    name, password = str(form.get("name", "")), str(form.get("password", ""))
    attempt = console.throttle.begin(name, request.client.host if request.client else "-")
    operator = await run_in_threadpool(authenticate, console.store, name, password)
    if operator is None:
        return console.page(request, "login.html", None, error=True, name=name[:64])  # the words: login.html
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
    shown = _list_filters(request)
    before = request.query_params.get("before") or None
    rows, next_cursor = _list_rows(console, operator, shown, before)
    rows_html = Markup(console.templates.get_template("_rows.html").render(rows=rows, shown=shown))
    live = None if before else f"/events?{urlencode(shown.query | {'seen': seen_param({'rows': rows_html})})}"
    return console.page(
        request, "conversations.html", operator, rows_html=rows_html, shown=shown, next_cursor=next_cursor, live=live
    )


class ListFilters(BaseModel):
    """What a conversations list shows: one source, whose, which status, what was searched."""

    source: Source = "real"
    view: View = "all"
    status: ConversationStatus | None = None
    search: str = ""

    @property
    def query(self) -> dict[str, str]:
        return {"source": self.source, "view": self.view, "status": self.status or "", "q": self.search}


def _list_filters(request: Request) -> ListFilters:
    params = request.query_params
    status = params.get("status") or None
    return ListFilters(
        source="simulation" if params.get("source") == "simulation" else "real",
        view=parse_view(params.get("view") or "all"),
        status=parse_status(status) if status else None,
        search=params.get("q") or "",
    )


def _list_rows(
    console: Console, operator: Operator, shown: ListFilters, before: str | None
) -> tuple[list[CustomerSummary], str | None]:
    rows = list_customers(
        console.store,
        shown.source,
        search=shown.search or None,
        limit=PAGE_ROWS + 1,
        reader=operator.name,
        before=before,
        view=shown.view,
        status=shown.status,
    )
    more = len(rows) > PAGE_ROWS
    rows = rows[:PAGE_ROWS]
    return rows, rows[-1].cursor if more else None


async def list_events(request: Request) -> Response:
    """The conversations list's first page again whenever it changes, and what needs the
    operator's attention, as server-sent events."""
    console = console_of(request)
    operator = require(await run_in_threadpool(signed_in, request, console.store), Role.VIEWER)
    shown = _list_filters(request)
    rows_template = console.templates.get_template("_rows.html")

    def events() -> list[tuple[str, str]]:
        rows, _ = _list_rows(console, operator, shown, None)
        return [("rows", rows_template.render(rows=rows, shown=shown)), _attention(console, operator)]

    return live_stream(request, console.streams, _slot_owner(request, operator), console.changes, events)


async def attention_events(request: Request) -> Response:
    """What needs the operator's attention, for a page that shows nothing else live."""
    console = console_of(request)
    operator = require(await run_in_threadpool(signed_in, request, console.store), Role.VIEWER)
    return live_stream(
        request,
        console.streams,
        _slot_owner(request, operator),
        console.changes,
        lambda: [_attention(console, operator)],
    )


def conversation(request: Request) -> Response:
    console = console_of(request)
    operator = signed_in(request, console.store)
    if operator is None:
        return RedirectResponse("/login", status_code=303)
    customer_id = int(request.path_params["customer_id"])
    customer = console.customer(customer_id)
    lines = console.lines(customer_id)
    live_html = Markup(console.live_fragment(customer_id, operator, csrf_token(request), lines))
    return console.page(
        request,
        "conversation.html",
        operator,
        customer=customer,
        name=display_name(console.store, customer_id) or customer.conversation_id,
        lines=lines,
        live_html=live_html,
        live=f"/c/{customer_id}/events?seen={seen_param({'transcript': live_html})}",
        memory=console.memory.notes(customer_id),
        observing=observing_route(
            console.store, customer.account_id, customer.conversation_type, customer.conversation_id
        ),
        request_id=f"console-{int(time.time())}-{secrets.token_hex(4)}",  # kept by a resubmitted form
    )


async def events(request: Request) -> Response:
    """The conversation's transcript and controls again whenever they change, and what needs
    the operator's attention, as server-sent events."""
    console = console_of(request)
    operator = require(await run_in_threadpool(signed_in, request, console.store), Role.VIEWER)
    customer_id = int(request.path_params["customer_id"])
    await run_in_threadpool(console.customer, customer_id)  # 404 for no such customer
    csrf = csrf_token(request)
    seen: list[tuple[object, ...]] = []
    fragment: list[tuple[str, str]] = []

    def events() -> list[tuple[str, str]]:
        version = transcript_version(console.store, customer_id)
        if [version] != seen:  # the transcript is read (session logs too) only when it changed
            seen[:] = [version]
            fragment[:] = [("transcript", console.live_fragment(customer_id, operator, csrf))]
        return [*fragment, _attention(console, operator)]

    return live_stream(request, console.streams, _slot_owner(request, operator), console.changes, events)


def _attention(console: Console, operator: Operator) -> tuple[str, str]:
    now = attention(console.store, operator.name)
    data = {
        "badge": now.badge,
        "waiting": [[c, name] for c, name in now.waiting.items()],
        "mine": [[c, name, unread] for c, (name, unread) in now.mine_unread.items()],
    }
    return "attention", json.dumps(data, ensure_ascii=False)


def _slot_owner(request: Request, operator: Operator) -> str:
    return f"{operator.name}\0{request.session.get('since')}"


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
        handoffs=[  # nobody took them yet; what a human already handles is in their list
            row
            for source in SOURCES
            for row in list_customers(store, source, limit=200, reader=operator.name, status=WAITING, paused=True)
        ],
        unknown=list_requests(store, OutboxState.RESULT_UNKNOWN, limit=200),
        failed=list_requests(store, OutboxState.FAILED, limit=200),
        checkpoints=checkpoint_views(store),
        pauses=input_pauses(store),
        alerts=backlog(store),
        webhook=console.runtime.settings.alerts.webhook_url is not None,  # else alerts go to the worker log
        # Routes whose agent profile left the settings: their customers are not answered.
        lost_profiles=unknown_profile_routes(store, list_routes(store), console.runtime.settings.agent.profile_names),
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
    console = console_of(request)
    return scrape(request, console.registry, console.runtime.settings)  # token or loopback only
