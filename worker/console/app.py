"""The console app: its routes, sessions and refusals. Pages read through runtime (customers,
transcript: worker.console.pages); actions go through the same runtime functions as the CLI
and are recorded with the operator's name (worker.console.actions). Simulation instances, the
team's canned replies and notes (worker.console.team) and the reports (worker.console.reports)
have modules of their own.

Pages follow the store live over server-sent events (worker.console.live): a conversation's
transcript and controls, the conversations list, and what needs the operator's attention."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError
from starlette.applications import Starlette
from starlette.convertors import IntegerConvertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from runtime import pipeline
from runtime.agent.rendering import zone_label
from runtime.customers.outside_text import visible
from runtime.errors import KefuError
from worker.console import actions, media, pages
from worker.console.auth import SignInThrottle, csrf_token, session_secret, signed_in
from worker.console.context import Console, MemoryReader, console_of
from worker.console.headers import SecurityHeaders
from worker.console.live import StoreChanges
from worker.console.metrics import registry_for
from worker.console.reports import report_routes, spoken_duration
from worker.console.simulations import simulation_routes
from worker.console.streams import StreamSlots
from worker.console.team import team_routes
from worker.context import WorkerRuntime
from worker.i18n import translations
from worker.transcript_words import said, who


class _IdConvertor(IntegerConvertor):
    """A store id in a path: at most 18 digits, within SQLite's integers, so a longer one is no
    page (404) rather than an overflow."""

    regex = "[0-9]{1,18}"


register_url_convertor("id", _IdConvertor())

HERE = Path(__file__).parent


def shown(value: object) -> object:
    """Names, titles and lines from outside with their bidi overrides and zero-width characters
    visible (`\\u202e`): a buyer cannot pass for another on an operator's screen."""
    return visible(value) if type(value) is str else value


def create_app(runtime: WorkerRuntime, dispatch: Callable[[pipeline.FollowUp], object] | None = None) -> Starlette:
    """The console over `runtime`'s shard. `dispatch` hands a send's follow-up work (a receipt
    query, a later attempt) to the workers; None leaves it to their reconciler."""
    settings = runtime.settings
    console = Console(
        runtime=runtime,
        hand_on=dispatch or (lambda work: None),  # no workers to hand to: their reconciler finds the work
        templates=_templates(runtime),
        throttle=SignInThrottle(),
        streams=StreamSlots(),
        changes=StoreChanges(runtime.store.path),
        memory=MemoryReader(settings.memory_path),
        registry=registry_for(runtime.store, settings),
    )
    middleware = [
        Middleware(SecurityHeaders),
        Middleware(
            SessionMiddleware,
            secret_key=session_secret(settings.data_dir),
            same_site="strict",
            session_cookie="kefu_console",
            https_only=settings.console.secure_cookies,
        ),
    ]
    app = Starlette(
        routes=_routes(console),
        middleware=middleware,
        exception_handlers={HTTPException: _refused, KefuError: _refused, ValidationError: _refused},
    )
    app.state.console = console
    return app


def _templates(runtime: WorkerRuntime) -> Jinja2Templates:
    zone = runtime.settings.zone
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.finalize = shown  # every value a page prints, before it is escaped
    templates.env.filters["when"] = lambda ms: (
        datetime.fromtimestamp(ms / 1000, tz=UTC).astimezone(zone).strftime("%Y-%m-%d %H:%M:%S")
    )
    templates.env.add_extension("jinja2.ext.i18n")  # {{ _("take over") }}: worker.i18n
    words = translations(runtime.settings.language, "console")
    templates.env.install_gettext_translations(words, newstyle=True)  # type: ignore[attr-defined]
    templates.env.globals["who"] = lambda line: who(line, words.gettext)  # worker.transcript_words
    templates.env.globals["said"] = lambda line: said(line, words.gettext)
    templates.env.globals["language"] = runtime.settings.language.replace("_", "-")  # <html lang>
    templates.env.filters["duration"] = lambda seconds: spoken_duration(seconds, words.gettext)  # reports
    templates.env.filters["combine"] = lambda base, change: {**base, **change}  # a link's query, one part changed
    templates.env.globals["zone"] = zone_label(zone)  # every time a page shows is in it: said once, in the header
    return templates


def _routes(console: Console) -> list[BaseRoute]:
    simulations = simulation_routes(
        console.store, console.runtime.settings.simulator_path, console.page, console.act, console.hand_on
    )
    return [
        Route("/login", pages.login_page, methods=["GET"]),
        Route("/login", pages.login, methods=["POST"]),
        Route("/logout", pages.logout, methods=["POST"]),
        Route("/", pages.conversations),
        Route("/events", pages.list_events),
        Route("/attention", pages.attention_events),
        Route("/c/{customer_id:id}", pages.conversation),
        Route("/c/{customer_id:id}/events", pages.events),
        Route("/c/{customer_id:id}/image/{sha256}", pages.image),
        Route("/c/{customer_id:id}/media/{sha256}", media.media),
        Route("/c/{customer_id:id}/take-over", actions.take_over, methods=["POST"]),
        Route("/c/{customer_id:id}/hand-back", actions.hand_back, methods=["POST"]),
        Route("/c/{customer_id:id}/assign", actions.assign, methods=["POST"]),
        Route("/c/{customer_id:id}/resolve", actions.resolve, methods=["POST"]),
        Route("/c/{customer_id:id}/snooze", actions.snooze, methods=["POST"]),
        Route("/c/{customer_id:id}/reopen", actions.reopen, methods=["POST"]),
        Route("/c/{customer_id:id}/send", actions.send, methods=["POST"]),
        Route("/c/{customer_id:id}/read", actions.mark_read, methods=["POST"]),
        Route("/outbox/{request_id}/confirm", actions.confirm, methods=["POST"]),
        Route("/outbox/{request_id}/retry", actions.retry, methods=["POST"]),
        Route("/ops", pages.ops),
        Route("/ops/input/pause", actions.input_pause, methods=["POST"]),
        Route("/ops/input/resume", actions.input_resume, methods=["POST"]),
        *simulations,
        *team_routes(),
        *report_routes(),
        Route("/healthz", pages.healthz),
        Route("/readyz", pages.readyz),
        Route("/metrics", pages.metrics),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]


async def _refused(request: Request, error: Exception) -> Response:
    """One answer for every refusal: bad input (a KefuError, a ManualSend that does not
    validate) is a 400 naming its code; sign-in and role refusals come as HTTPException."""
    if isinstance(error, KefuError | ValidationError):
        error = HTTPException(400, _problem(error))
    assert isinstance(error, HTTPException)
    if error.status_code == 401:
        return RedirectResponse("/login", status_code=303)
    console = console_of(request)
    customer_id = request.path_params.get("customer_id")
    back = f"/c/{customer_id}" if customer_id is not None and request.method == "POST" else None
    try:  # the header's navigation, for who is signed in; a store that cannot say still gets the page
        operator = signed_in(request, console.store)
    except DBAPIError:
        operator = None
    page = console.templates.get_template("error.html").render(
        detail=error.detail, back=back, operator=operator, csrf=csrf_token(request)
    )
    return HTMLResponse(page, error.status_code)


def _problem(error: Exception) -> str:
    if isinstance(error, KefuError):
        return f"{error.code}: {error.message}"
    if isinstance(error, ValidationError):  # pydantic's "Value error, " says nothing to an operator
        return "KEFU_INVALID_INPUT: " + "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in error.errors())
    return f"KEFU_INVALID_INPUT: {error}"
