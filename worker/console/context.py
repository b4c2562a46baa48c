"""What every page and action of the console shares: the shard's runtime, the templates, the
sign-in throttle and the stream slots, kept on the app (`console_of`) so that each handler is
a plain function of its request."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from sqlalchemy.exc import DBAPIError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from runtime import pipeline
from runtime.admission.batches import load_customer
from runtime.customers.assignment import assignment
from runtime.customers.notes import list_notes
from runtime.customers.transcript import TranscriptLine, transcript
from runtime.errors import KefuError
from runtime.memory.engine import scope_of
from runtime.memory.recall import folders_recalled
from runtime.memory.store import Folder, MemoryStore
from runtime.operators.accounts import Operator, Role, list_operators
from runtime.operators.status import notices
from runtime.store import DeliveryStore
from runtime.store.tables import Customer
from worker.console.auth import SignInThrottle, check_csrf, csrf_token, require, signed_in
from worker.console.live import StoreChanges
from worker.console.streams import StreamSlots
from worker.context import WorkerRuntime

FORM_MAX_BYTES = 64 * 1024  # a form's fields (a message is at most 4,000 characters); a file comes on top


@dataclass
class Console:
    runtime: WorkerRuntime
    hand_on: Callable[[pipeline.FollowUp], object]  # a send's follow-up work, to the workers
    templates: Jinja2Templates
    throttle: SignInThrottle
    streams: StreamSlots
    changes: StoreChanges  # what every live view waits on
    memory: MemoryReader
    registry: CollectorRegistry

    @property
    def store(self) -> DeliveryStore:
        return self.runtime.store

    @property
    def max_file(self) -> int:
        return self.runtime.settings.media_max_bytes

    def page(self, request: Request, template: str, operator: Operator | None, **context: Any) -> Response:
        context |= {"operator": operator, "csrf": csrf_token(request)}
        if operator is not None:
            context["notices"] = notices(self.store)
        return self.templates.TemplateResponse(request, template, context)

    def lines(self, customer_id: int) -> list[TranscriptLine]:
        return transcript(self.store, customer_id, sessions_dir=self.runtime.settings.sessions_dir).lines

    def live_fragment(
        self, customer_id: int, operator: Operator, csrf: str, lines: list[TranscriptLine] | None = None
    ) -> str:
        """What the conversation page replaces as it changes: its transcript, and its handling
        and assignment with the controls they allow now (a take-over button never outlives the
        take-over)."""
        lines = self.lines(customer_id) if lines is None else lines
        return self.templates.get_template("_live.html").render(
            customer=self.customer(customer_id),
            lines=lines,
            assigned=assignment(self.store, customer_id),
            operators=self.operator_names(),
            notes=list_notes(self.store, customer_id),
            operator=operator,
            csrf=csrf,
        )

    def operator_names(self) -> list[str]:
        """Who a conversation can be assigned to."""
        return [o.name for o in list_operators(self.store) if o.role.allows(Role.OPERATOR)]

    async def act(self, request: Request, role: Role, max_bytes: int = FORM_MAX_BYTES) -> tuple[Operator, FormData]:
        """Who acts (from the cookie alone: nobody's form is read before that), then the form."""
        operator = require(await run_in_threadpool(signed_in, request, self.store), role)
        form = await read_form(request, max_bytes)
        check_csrf(request, form.get("csrf"))
        return operator, form

    def customer(self, customer_id: int) -> Customer:
        with self.store.read() as conn:
            customer = load_customer(conn, customer_id)
        if customer is None:
            raise HTTPException(404, f"KEFU_CUSTOMER_UNKNOWN: no customer {customer_id}")
        return customer


def console_of(request: Request) -> Console:
    console = request.app.state.console
    assert isinstance(console, Console)
    return console


async def read_form(request: Request, max_bytes: int = FORM_MAX_BYTES) -> FormData:
    """The form, refused unread when its declared length is over `max_bytes` (the server never
    reads past a declared length), with at most one file: an oversized upload never reaches disk."""
    length = request.headers.get("content-length", "")
    if not (length.isascii() and length.isdigit()):
        raise HTTPException(411, "KEFU_LENGTH_REQUIRED: send the form with its Content-Length")
    if int(length) > max_bytes:
        raise HTTPException(413, f"KEFU_REQUEST_TOO_LARGE: the form is {length} bytes; the limit is {max_bytes}")
    return await request.form(max_files=1, max_fields=16)


def back(customer_id: int) -> Response:
    return RedirectResponse(f"/c/{customer_id}", status_code=303)


class MemoryReader:
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
        except DBAPIError as error:
            return f"KEFU_MEMORY_STORE_BUSY: {type(error).__name__}"
