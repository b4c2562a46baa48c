"""The console's tools for a shop's team (issue 41): the shop's canned replies (a page to keep
them; the reply box's `/` search, worker/console/static/reply_box.js) and operators' private
notes on a conversation. Each goes through runtime (runtime.operators.canned_replies,
runtime.customers.notes), which records who changed what in the change's own transaction.

Reading needs a signed-in viewer; changing needs the operator role and the session's CSRF token
(`Console.act`), as every console action does."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from runtime.customers.notes import add_note
from runtime.errors import KefuError
from runtime.operators.accounts import Operator, Role
from runtime.operators.canned_replies import add_reply, delete_reply, edit_reply, list_replies, replies_for
from runtime.store.tables import CannedReply
from worker.console.auth import require, signed_in
from worker.console.context import back, console_of

QUERY_MAX = 64  # what follows the `/` in the reply box; longer is no shortcut anyone typed


def team_routes() -> list[BaseRoute]:
    """The canned replies page and its actions, the reply box's search, a note's form."""
    return [
        Route("/canned", canned_page, methods=["GET"]),
        Route("/canned", canned_add, methods=["POST"]),
        Route("/canned/{reply_id:id}/edit", canned_edit, methods=["POST"]),
        Route("/canned/{reply_id:id}/delete", canned_delete, methods=["POST"]),
        Route("/c/{customer_id:id}/canned", canned_search, methods=["GET"]),
        Route("/c/{customer_id:id}/notes", note_add, methods=["POST"]),
    ]


def _page(
    request: Request, operator: Operator, error: str | None = None, draft: CannedReply | None = None, status: int = 200
) -> Response:
    console = console_of(request)
    response = console.page(
        request, "canned.html", operator, replies=list_replies(console.store), error=error, draft=draft
    )
    response.status_code = status
    return response


def canned_page(request: Request) -> Response:
    operator = signed_in(request, console_of(request).store)
    if operator is None:
        return RedirectResponse("/login", status_code=303)
    return _page(request, operator)


def _refused(request: Request, operator: Operator, error: KefuError, draft: CannedReply | None = None) -> Response:
    """The page again with what was wrong and, for a new reply, what the operator typed: a
    taken shortcut costs them nothing but a new one."""
    return _page(request, operator, f"{error.code}: {error.message}", draft, 409 if "EXISTS" in error.code else 400)


async def canned_add(request: Request) -> Response:
    console = console_of(request)
    operator, form = await console.act(request, Role.OPERATOR)
    shortcut, body = str(form.get("shortcut", "")), str(form.get("body", ""))
    try:
        await run_in_threadpool(add_reply, console.store, operator.name, shortcut, body)
    except KefuError as error:
        draft = CannedReply(shortcut=shortcut, body=body, updated_by=operator.name, updated_at=0)
        return await run_in_threadpool(_refused, request, operator, error, draft)
    return RedirectResponse("/canned", status_code=303)


async def canned_edit(request: Request) -> Response:
    console = console_of(request)
    operator, form = await console.act(request, Role.OPERATOR)
    reply_id = int(request.path_params["reply_id"])
    shortcut, body = str(form.get("shortcut", "")), str(form.get("body", ""))
    try:
        await run_in_threadpool(edit_reply, console.store, operator.name, reply_id, body, shortcut)
    except KefuError as error:
        return await run_in_threadpool(_refused, request, operator, error)
    return RedirectResponse("/canned", status_code=303)


async def canned_delete(request: Request) -> Response:
    console = console_of(request)
    operator, _ = await console.act(request, Role.OPERATOR)
    await run_in_threadpool(delete_reply, console.store, operator.name, int(request.path_params["reply_id"]))
    return RedirectResponse("/canned", status_code=303)


def canned_search(request: Request) -> Response:
    """The replies matching `?q=` as the signed-in operator would send them in this conversation
    (JSON, at most 10): the reply box inserts `text` as it is."""
    console = console_of(request)
    operator = require(signed_in(request, console.store), Role.VIEWER)
    customer_id = int(request.path_params["customer_id"])
    console.customer(customer_id)  # 404 for no such customer
    query = request.query_params.get("q", "")[:QUERY_MAX]
    found = replies_for(console.store, customer_id, operator.name, query)
    return JSONResponse([r.model_dump() for r in found], headers={"Cache-Control": "no-store"})


async def note_add(request: Request) -> Response:
    console = console_of(request)
    operator, form = await console.act(request, Role.OPERATOR)
    customer_id = int(request.path_params["customer_id"])
    await run_in_threadpool(add_note, console.store, operator.name, customer_id, str(form.get("body", "")))
    return back(customer_id)
