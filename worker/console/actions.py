"""The console's actions: take over and hand back, assign, resolve, snooze and reopen, send,
settle an unknown send, retry a failed one, mark read, pause and resume input. Each goes
through the same runtime function as the CLI and is recorded with the operator's name."""

from __future__ import annotations

from collections.abc import Callable

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from runtime import pipeline
from runtime.customers import assignment
from runtime.customers.summaries import ack_customer_read
from runtime.errors import KefuError
from runtime.inbound.input_pause import pause_input
from runtime.operators.accounts import Operator, Role, record_action
from runtime.outbox.manual import message_parts, retry_manual, send_manual_parts
from runtime.outbox.media import check_media_size
from runtime.outbox.requests import confirm_result
from runtime.store import DeliveryStore, now_ms
from worker.console.context import FORM_MAX_BYTES, back, console_of
from worker.context import WorkerRuntime

MAX_SNOOZE_HOURS = 24 * 31


async def take_over(request: Request) -> Response:
    return await _on_conversation(
        request,
        lambda store, customer_id, operator, form: assignment.take_over(
            store, customer_id, operator.name, str(form.get("reason") or "")
        ),
    )


async def hand_back(request: Request) -> Response:
    return await _on_conversation(request, lambda store, c, operator, _: assignment.hand_back(store, c, operator.name))


async def assign(request: Request) -> Response:
    """To an operator (`assignee`), to the one asking (`assignee` = "me"), or to nobody (empty)."""

    def give(store: DeliveryStore, customer_id: int, operator: Operator, form: FormData) -> object:
        chosen = str(form.get("assignee") or "").strip()
        assignee = operator.name if chosen == "me" else chosen or None
        return assignment.assign(store, customer_id, assignee, operator.name)

    return await _on_conversation(request, give)


async def resolve(request: Request) -> Response:
    return await _on_conversation(request, lambda store, c, operator, _: assignment.resolve(store, c, operator.name))


async def snooze(request: Request) -> Response:
    """For `hours` (a number from the form: 1, 4, 24 ...), at most a month."""

    def hold(store: DeliveryStore, customer_id: int, operator: Operator, form: FormData) -> object:
        hours = str(form.get("hours") or "")
        if not (hours.isascii() and hours.isdigit() and 1 <= int(hours) <= MAX_SNOOZE_HOURS):
            raise KefuError(
                "KEFU_INVALID_INPUT", f"snooze for 1 to {MAX_SNOOZE_HOURS} hours", "pick a time from the list"
            )
        return assignment.snooze(store, customer_id, now_ms() + int(hours) * 3_600_000, operator.name)

    return await _on_conversation(request, hold)


async def reopen(request: Request) -> Response:
    return await _on_conversation(request, lambda store, c, operator, _: assignment.reopen(store, c, operator.name))


async def _on_conversation(
    request: Request, change: Callable[[DeliveryStore, int, Operator, FormData], object]
) -> Response:
    """An operator's change of a conversation's handling or place in the inbox
    (runtime.customers.assignment, which records it), then the conversation again."""
    console = console_of(request)
    operator, form = await console.act(request, Role.OPERATOR)
    customer_id = int(request.path_params["customer_id"])
    await run_in_threadpool(change, console.store, customer_id, operator, form)
    return back(customer_id)


async def send(request: Request) -> Response:
    """Text, a file, or a file then its text (one request each, sent in that order)."""
    console = console_of(request)
    max_file = console.max_file
    operator, form = await console.act(request, Role.OPERATOR, max_file + FORM_MAX_BYTES)
    customer_id = int(request.path_params["customer_id"])
    request_id, text = str(form.get("request_id", "")), str(form.get("text", "")).strip() or None
    attached = None
    upload = form.get("file")
    if isinstance(upload, UploadFile) and upload.filename:
        attached = await upload.read(), upload.filename  # at most the form's length, checked before it was read
        await form.close()
        check_media_size(upload.filename, len(attached[0]), max_file)
    parts = message_parts(request_id, customer_id, text, attached, operator.name, _expected_epoch(form))
    registered = await run_in_threadpool(send_manual_parts, console.store, parts)
    for part in registered:
        await run_in_threadpool(record_action, console.store, operator.name, "send", customer_id, part.request_id)
    await run_in_threadpool(_deliver, console.runtime, [part.request_id for part in registered], console.hand_on)
    return back(customer_id)


def _expected_epoch(form: FormData) -> int | None:
    """The handling epoch the conversation page showed when it was rendered (its send form
    carries it): a send is refused once a pause or takeover moved it since
    (runtime.outbox.manual). A post without one (a script's) sends as `kefu send` does."""
    epoch = form.get("expected_epoch")
    if epoch is None:
        return None
    if not (isinstance(epoch, str) and epoch.isascii() and epoch.isdigit() and len(epoch) <= 18):
        raise KefuError(
            "KEFU_INVALID_INPUT", "expected_epoch must be a whole number", "open the conversation again and send"
        )
    return int(epoch)


async def confirm(request: Request) -> Response:
    console = console_of(request)
    operator, form = await console.act(request, Role.OPERATOR)
    request_id, delivered = request.path_params["request_id"], form.get("delivered") == "yes"
    settled = await run_in_threadpool(confirm_result, console.store, request_id, delivered)
    detail = "delivered" if delivered else "not delivered"
    await run_in_threadpool(
        record_action, console.store, operator.name, "confirm", settled.customer_id, request_id, detail
    )
    return back(settled.customer_id)


async def retry(request: Request) -> Response:
    console = console_of(request)
    operator, form = await console.act(request, Role.OPERATOR)
    previous, new_id = request.path_params["request_id"], str(form.get("request_id", ""))
    retried = await run_in_threadpool(retry_manual, console.store, new_id, previous, operator.name)
    await run_in_threadpool(record_action, console.store, operator.name, "retry", retried.customer_id, new_id, previous)
    await run_in_threadpool(_deliver, console.runtime, [new_id], console.hand_on)
    return back(retried.customer_id)


async def mark_read(request: Request) -> Response:
    console = console_of(request)
    operator, _ = await console.act(request, Role.VIEWER)
    customer_id = int(request.path_params["customer_id"])
    await run_in_threadpool(ack_customer_read, console.store, customer_id, operator.name)
    return back(customer_id)


async def input_pause(request: Request) -> Response:
    """Hold new pages (they are kept, not lost) for the host or one account."""
    console = console_of(request)
    operator, form = await console.act(request, Role.ADMIN)
    account = str(form.get("account") or "") or None
    await run_in_threadpool(pause_input, console.store, account)
    await run_in_threadpool(record_action, console.store, operator.name, "pause-input", None, None, account or "host")
    return RedirectResponse("/ops", status_code=303)


async def input_resume(request: Request) -> Response:
    """Take in pages again: what was held is ingested, what was kept from admission admitted."""
    console = console_of(request)
    operator, form = await console.act(request, Role.ADMIN)
    account = str(form.get("account") or "") or None
    resumed = await run_in_threadpool(pipeline.resume, console.store, account)
    await run_in_threadpool(record_action, console.store, operator.name, "resume-input", None, None, account or "host")
    for work in resumed.follow_ups:
        await run_in_threadpool(console.hand_on, work)
    return RedirectResponse("/ops", status_code=303)


def _deliver(runtime: WorkerRuntime, request_ids: list[str], hand_on: Callable[[pipeline.FollowUp], object]) -> None:
    """Attempt registered manual sends now, in order, as the CLI's `kefu send` does; what
    follows (a receipt query, a part that waits its turn) goes to the workers. A resubmitted
    form finds them settled: nothing is sent again."""
    for _, step in pipeline.deliver_in_order(runtime, request_ids):
        for work in step.follow_ups:
            hand_on(work)
