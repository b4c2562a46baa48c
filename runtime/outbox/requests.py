"""The outbox (SPEC 3.8): an intent is durable before any platform call, and each request
gets exactly one attempt unless the platform said the message was not submitted.

A second begin for an attempt whose outcome was never recorded (its worker crashed, or the
task was delivered twice) never calls the platform: the request becomes `result-unknown`,
which only evidence settles: the attempt's own late outcome, a provider receipt query, the
platform's echo of the send, or an operator's confirm.

The statements that settle a request are named (runtime.store.queries), so ingestion runs them
inside the transaction that stores the echo.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel

from runtime.customers.summaries import Source, source_param
from runtime.errors import KefuError, RequestUnknown
from runtime.operators.alerts import AlertKind, raise_alert
from runtime.outbox.media import load_media
from runtime.outbox.read_receipts import reads_from_json
from runtime.outbox.recipients import REPLY_WEBHOOK, RecipientFacts, reply_webhook
from runtime.ports import MediaPayload, NeverReceived, OutboundSend, SendFailure, SendLookup, SendReceipt
from runtime.store import DeliveryStore, holders, now_ms, queries
from runtime.store.connection import Connection
from runtime.store.states import SETTLED, AttemptState, OutboxState, PlacementState
from runtime.store.tables import BuyerRead, OutboundIntent, OutboxRequest


@dataclass(frozen=True)
class AttemptGrant:
    attempt_no: int
    send: OutboundSend


@dataclass(frozen=True)
class AttemptSkipped:
    reason: Literal[
        "unknown-request",
        "settled",
        "in-progress",
        "result-unknown",
        "abandoned",  # its last attempt ended without an outcome (its process died): result-unknown now
        "revoked",
        "route-changed",
        "waiting-for-earlier",
        "skipped",
        "moving",  # the account is being handed to another shard: the side that serves it sends
    ]


def register_outbound(conn: Connection, intent: OutboundIntent, refused: str | None = None) -> OutboxRequest:
    """Persist the intent (idempotent on request id) and return the stored request.

    `refused` records an intent that fails before any platform call (its error code), so the
    caller and the operator can still look it up by request id.
    """
    at = now_ms()
    values = {**intent.model_dump(), "state": "failed" if refused else "pending", "error_code": refused}
    values |= {"created_at": at, "updated_at": at}
    if conn.execute(_REGISTER, values).rowcount == 1:
        if refused:  # stored as failed: no state change raises this one's alert
            raise_alert(conn, AlertKind.SEND_FAILED, intent.account_id, intent.customer_id, intent.request_id, refused)
        return OutboxRequest.model_validate(values)  # as stored: no read back
    return load_request(conn, intent.request_id)  # type: ignore[return-value]  # registered before


_INTENT_COLUMNS = (*OutboundIntent.model_fields, "state", "error_code", "created_at", "updated_at")
_REGISTER = queries.outbox_request.register(_INTENT_COLUMNS)


def load_request(conn: Connection, request_id: str) -> OutboxRequest | None:
    row = conn.execute(queries.outbox_request.BY_ID, {"r": request_id}).mappings().first()
    return OutboxRequest.model_validate(dict(row)) if row else None


class ReplyCheck(NamedTuple):
    """What an automatic reply's registration reads, in one statement, before it registers:
    whether to register it at all, and all that beginning its first attempt in the same
    transaction needs to know (begin_in's own reads, for a request that has none yet)."""

    current: bool  # work admitted under the batch's epoch may still act (runtime.admission.handling.is_current)
    earlier: str | None  # an auto request with this exact text for the same batch
    placement: str | None  # the account's placement state here
    account_live: bool
    route_current: bool  # the batch's route, at the batch's generation, still enabled
    queue_busy: bool  # a request of the customer registered before is still pending or sending
    # What the buyer read that the session was not told yet: the turn's next step's check (no
    # write of this transaction changes it).
    buyer_reads: list[BuyerRead]
    recipient: RecipientFacts  # who a direct reply goes to (runtime.outbox.recipients.recipient_of)


def reply_check(
    conn: Connection, customer_id: int, epoch: int, batch_id: str, route: tuple[str, int], body: str
) -> ReplyCheck:
    """`route`: the batch's (route id, route generation)."""
    row = conn.execute(
        queries.customer.REPLY_CHECK,
        {"c": customer_id, "e": epoch, "b": batch_id, "route": route[0], "g": route[1], "t": body},
    ).one()
    current, earlier, placement, live, route_current, busy, reads, *recipient = row
    flags = bool(live), bool(route_current), bool(busy)
    return ReplyCheck(bool(current), earlier, placement, *flags, reads_from_json(reads), tuple(recipient))


def _auto_send_is_stale(conn: Connection, request: OutboxRequest) -> str | None:
    row = conn.execute(queries.customer.AUTO_SEND_FACTS, {"c": request.customer_id, "b": request.batch_id}).first()
    if row is None:
        return None
    paused, epoch, generation, enabled_and_governing, account_live = row
    current = not paused and epoch == request.handling_epoch
    return _stale(current, bool(account_live), generation == request.route_generation and bool(enabled_and_governing))


def _stale(current: bool, account_live: bool, route_current: bool) -> str | None:
    """Why an automatic send may no longer go out: a human took over or the account cannot
    send (`revoked`), or its route changed since the batch was admitted, or another route
    governs the conversation now (`route-changed`)."""
    if not current or not account_live:
        return "revoked"
    return None if route_current else "route-changed"


def _next_after(conn: Connection, request_id: str) -> str | None:
    """The next request of this one's customer due for an attempt: None while this one, pending
    again, still comes first."""
    following = conn.execute(queries.outbox_request.NEXT_PENDING_AFTER, {"r": request_id}).scalar_one_or_none()
    return None if following == request_id else following


def next_after(store: DeliveryStore, request_id: str) -> str | None:
    """Once `request_id` no longer holds its customer's queue: the customer's next request due
    for an attempt (record_sent and record_failure read it in their own transaction)."""
    with store.read() as conn:
        return _next_after(conn, request_id)


def next_pending(store: DeliveryStore, customer_id: int) -> str | None:
    """The customer's earliest registered request still waiting for its attempt."""
    with store.read() as conn:
        return conn.execute(queries.outbox_request.NEXT_PENDING, {"c": customer_id}).scalar_one_or_none()


# The account's slice is sealed for a move here, or imported and not yet resumed: its requests
# exist on two shards at once, and neither may send them (runtime.placement.moves).
_HANDED_OFF = (PlacementState.SEALED, PlacementState.IMPORTING, PlacementState.MOVED)


def begin_attempt(
    store: DeliveryStore,
    request_id: str,
    owner: str,
    lease_s: float,
    can_send: Callable[[str], object] = lambda account_id: None,
) -> AttemptGrant | AttemptSkipped:
    """Begin the request's next attempt, or say why not. `can_send(account_id)` raises when the
    account has no way to send (no transport here): it runs before the attempt exists, so a
    missing transport never strands an attempt."""
    with store.write(durable=True) as conn:  # the send follows: never begun twice after a power loss
        request = load_request(conn, request_id)
        if request is None:
            return AttemptSkipped("unknown-request")
        return begin_in(conn, request, owner, lease_s, store.guard.token if store.guard else None, can_send)


def begin_in(
    conn: Connection,
    request: OutboxRequest,
    owner: str,
    lease_s: float,
    shard_token: int | None,
    can_send: Callable[[str], object] = lambda account_id: None,
    checked: ReplyCheck | None = None,
) -> AttemptGrant | AttemptSkipped:
    """`begin_attempt` inside the caller's durable write transaction: also how a reply's
    registration begins its first attempt, when the worker sends it at once (a transaction
    per reply fewer, runtime.pipeline.turn). `checked`: what that registration read in this
    transaction before it stored the request (two reads fewer)."""
    request_id, at = request.request_id, now_ms()
    if request.state in SETTLED:
        return AttemptSkipped("settled")
    if request.state == OutboxState.RESULT_UNKNOWN:
        return AttemptSkipped("result-unknown")
    can_send(request.account_id)
    never_attempted = request.state == OutboxState.PENDING and request.updated_at == request.created_at
    if checked is not None and never_attempted and request.origin == "auto" and request.follows is None:
        # Read before this request was stored: "busy" counts any request of the customer, so a
        # stored one found again (not new after all) waits, as an earlier one would.
        row: tuple[Any, ...] = (checked.placement, None, None, None, None, checked.queue_busy)
    else:
        checked = None
        # In one read: the account's placement, the request's last attempt, and whether a request
        # of the same customer registered earlier (rowid order) is still pending or sending.
        params = {"a": request.account_id, "r": request_id, "c": request.customer_id}
        row = tuple(conn.execute(queries.outbox_attempt.BEGIN_CHECKS, params).one())
    placement, last_no, last_state, last_started, last_owner, earlier = row
    if placement in _HANDED_OFF:
        return AttemptSkipped("moving")
    if last_state == AttemptState.STARTED:
        if last_started > at - int(lease_s * 1000) and not holders.gone(last_owner):
            return AttemptSkipped("in-progress")
        _mark(conn, request_id, last_no, "unknown", "result-unknown", error_code="KEFU_ATTEMPT_ABANDONED")
        return AttemptSkipped("abandoned")
    if earlier:
        return AttemptSkipped("waiting-for-earlier")  # replies reach a customer in registration order
    if request.follows is not None and _state_of(conn, request.follows) != "sent":
        # An earlier part of this reply failed or its result is unknown: stop here.
        _set_state(conn, request_id, "skipped", "KEFU_EARLIER_PART_NOT_SENT")
        return AttemptSkipped("skipped")
    stale = None
    if request.origin == "auto":
        stale = (
            _stale(checked.current, checked.account_live, checked.route_current)
            if checked
            else _auto_send_is_stale(conn, request)
        )
    if stale:
        _set_state(conn, request_id, stale, None)
        return AttemptSkipped(stale)  # type: ignore[arg-type]
    return _start_attempt(conn, request, (last_no or 0) + 1, owner, at, shard_token)


def _start_attempt(
    conn: Connection, request: OutboxRequest, attempt_no: int, owner: str, at: int, shard_token: int | None
) -> AttemptGrant:
    """Record the attempt as started and the request as sending, and build what the transport
    sends (its file's bytes, the session webhook valid now)."""
    request_id = request.request_id
    conn.execute(
        queries.outbox_attempt.START,
        {"r": request_id, "n": attempt_no, "o": owner, "at": at, "token": shard_token},
    )
    conn.execute(queries.outbox_request.MARK_SENDING, {"r": request_id, "at": at})
    media = None
    if request.media_sha256 is not None:
        ref, data = load_media(conn, request.media_sha256)
        media = MediaPayload(kind=ref.kind, mime=ref.mime, file_name=request.body, data=data)  # type: ignore[arg-type]
    # A reply to the conversation's session webhook posts to the latest one valid now (None: the
    # transport sends nothing and fails the attempt, runtime.outbox.recipients).
    hook = reply_webhook(conn, request.customer_id, at) if request.recipient_id == REPLY_WEBHOOK else None
    send = OutboundSend(
        request_id=request.request_id,
        account_id=request.account_id,
        conversation_id=request.conversation_id,
        recipient_id=request.recipient_id,
        text=request.body,
        media=media,
        reply_webhook=hook,
    )
    return AttemptGrant(attempt_no, send)


def _state_of(conn: Connection, request_id: str) -> str | None:
    return conn.execute(queries.outbox_request.STATE, {"r": request_id}).scalar_one_or_none()


def _set_state(conn: Connection, request_id: str, state: str, error_code: str | None) -> None:
    conn.execute(
        queries.outbox_request.SET_STATE,
        {"s": state, "e": error_code, "at": now_ms(), "r": request_id},
    )


def _on_sent(origin: str, echo: str | None) -> list[str]:
    """What else a send settled as sent writes (statements over the same named parameters):
    `echo`, the platform's echo of it stored already, is classified again."""
    statements = []
    if echo is not None:
        statements.append(queries.inbound_message.RECLASSIFY_EARLY_ECHO)
    if origin == "manual":  # mirrored as the console operator's inbound (adopt_console_echoes)
        statements.append(queries.inbound_message.MIRROR_MANUAL)
    return statements


def _mark(
    conn: Connection,
    request_id: str,
    attempt_no: int,
    attempt_state: str,
    request_state: str,
    platform_message_id: str | None = None,
    error_code: str | None = None,
) -> None:
    params = {
        "s": attempt_state,
        "rs": request_state,
        "at": now_ms(),
        "p": platform_message_id,
        "e": error_code,
        "r": request_id,
        "n": attempt_no,
    }
    conn.execute(queries.outbox_attempt.MARK, params)
    changed = conn.execute(queries.outbox_request.MARK, params).first()
    if request_state == OutboxState.SENT and changed is not None:
        for statement in _on_sent(*changed):
            conn.execute(statement, params)


def adopt_console_echoes(db: Connection, account_id: str, conversation_id: str, ids: list[str]) -> None:
    """Echoes of sent manual messages take over their mirror's placeholder id, so storing the
    echo finds that row instead of adding a second one. Runs inside ingestion's transaction,
    for a conversation where queries.customer.PLACEHOLDER_WAITING holds (ingestion asks it in passing)."""
    echoes = db.execute(queries.outbox_request.CONSOLE_ECHOES, (account_id, json.dumps(ids))).fetchall()
    for request_id, platform_message_id in echoes:
        db.execute(
            queries.inbound_message.ADOPT_PLACEHOLDER, (platform_message_id, account_id, conversation_id, request_id)
        )


def settle_by_echo(db: Connection, account_id: str, request_id: str, platform_message_id: str) -> bool:
    """The platform echoed our own send (its client reference is the request id): that proves
    delivery of a request still sending or result-unknown. Runs inside ingestion's transaction."""
    params = {"a": account_id, "r": request_id, "p": platform_message_id, "at": now_ms()}
    changed = db.execute(queries.outbox_request.SETTLE_BY_ECHO, params).fetchone()
    if changed is None:
        return False
    for statement in (queries.outbox_attempt.SETTLE_BY_ECHO, *_on_sent(*changed)):
        db.execute(statement, params)
    return True


def record_sent(store: DeliveryStore, request_id: str, attempt_no: int, receipt: SendReceipt) -> str | None:
    """The platform accepted the send. Also settles a request marked result-unknown meanwhile.
    Returns the customer's next pending request, read in the same transaction: it is due now."""
    with store.write(durable=True) as conn:
        _mark(conn, request_id, attempt_no, "sent", "sent", platform_message_id=receipt.platform_message_id)
        return _next_after(conn, request_id)


def record_failure(store: DeliveryStore, request_id: str, attempt_no: int, failure: SendFailure) -> str | None:
    """The attempt failed. Returns the customer's next pending request (read in the same
    transaction), unless this one, pending again, still holds the queue."""
    request_state = {"not-submitted": "pending", "rejected": "failed", "unknown": "result-unknown"}[failure.kind]
    with store.write(durable=True) as conn:
        _mark(conn, request_id, attempt_no, failure.kind, request_state, error_code=failure.code)
        return _next_after(conn, request_id)


def settle_by_receipt(store: DeliveryStore, request_id: str, lookup: SendLookup, attempt_lease_s: float) -> bool:
    """Record one provider receipt query of a result-unknown request: a receipt proves delivery;
    a definitive "never received" makes it pending again (a new attempt, never a second
    delivery), but only once its last attempt is older than the attempt lease: before that, a
    send still on its way may arrive after the answer, and the query does not count. So also
    for an attempt whose process died: the kernel may still be sending what it wrote, and the
    platform still be handling it. Queries are counted, so the reconciler stops asking after
    `receipt_query_limit`. True when the request left result-unknown."""
    with store.write(durable=True) as conn:
        request = load_request(conn, request_id)
        if request is None or request.state != OutboxState.RESULT_UNKNOWN:
            return False
        # result-unknown always follows an attempt
        attempt_no, started_at = conn.execute(queries.outbox_attempt.LAST, {"r": request_id}).one()
        if isinstance(lookup, NeverReceived) and started_at > now_ms() - int(attempt_lease_s * 1000):
            return False  # too early to tell: ask again on a later pass
        conn.execute(queries.outbox_request.COUNT_RECEIPT_QUERY, {"r": request_id})
        if lookup is None:
            return False
        if isinstance(lookup, NeverReceived):
            _mark(conn, request_id, attempt_no, "not-submitted", "pending", error_code="KEFU_NEVER_RECEIVED")
        else:
            _mark(conn, request_id, attempt_no, "sent", "sent", platform_message_id=lookup.platform_message_id)
        return True


def confirm_result(
    store: DeliveryStore, request_id: str, delivered: bool, platform_message_id: str | None = None
) -> OutboxRequest:
    """An operator settles a `result-unknown` request after checking the platform."""
    with store.write(durable=True) as conn:
        request = load_request(conn, request_id)
        if request is None:
            raise RequestUnknown(request_id)
        if request.state != OutboxState.RESULT_UNKNOWN:
            raise KefuError(
                "KEFU_REQUEST_NOT_UNKNOWN",
                f"request {request_id!r} is {request.state}; only a result-unknown request can be confirmed",
            )
        attempt_no = conn.execute(queries.outbox_attempt.LAST_NO, {"r": request_id}).scalar_one()
        if delivered:
            _mark(conn, request_id, attempt_no, "sent", "sent", platform_message_id=platform_message_id)
        else:
            _mark(conn, request_id, attempt_no, "unknown", "failed", error_code="KEFU_OPERATOR_NOT_DELIVERED")
        return load_request(conn, request_id)  # type: ignore[return-value]


class OutboxRow(BaseModel):
    request_id: str
    customer_id: int
    conversation_id: str
    origin: str
    state: str
    error_code: str | None
    preview: str
    updated_at: int


def list_requests(
    store: DeliveryStore, state: str | None, limit: int = 50, source: Source | None = None
) -> list[OutboxRow]:
    """Most recently changed first; `source`: one source's requests (None: both, SPEC 3.13)."""
    with store.read() as conn:
        rows = conn.execute(
            queries.outbox_request.RECENT,
            {"s": state, "n": limit, "sim": source_param(source)},
        ).mappings()
        return [OutboxRow.model_validate(dict(row)) for row in rows]


def requests_to_attempt(conn: Connection, quiet_before: int, lease_before: int, limit: int) -> list[str]:
    """Pending requests nobody attempted for a grace, and attempts whose lease ran out without
    an outcome (the reconciler; begin_attempt turns the latter into result-unknown)."""
    # Each state its own limit: many quiet pending requests never starve expired attempts.
    query = queries.outbox_request.TO_ATTEMPT
    return [str(r) for r in conn.execute(query, {"t": quiet_before, "lease": lease_before, "n": limit}).scalars()]


def sends_of_gone_senders(conn: Connection, limit: int) -> list[str]:
    """Requests whose attempt's process is seen gone (runtime.store.holders) before it recorded an
    outcome: attempted again now, which records them result-unknown and asks the platform at
    once (a receipt settles them), instead of only after the attempt lease."""
    rows = conn.execute(queries.outbox_request.SENDING_WITH_OWNER, {"n": limit})
    return [str(request_id) for request_id, owner in rows if holders.gone(owner)]


def requests_to_settle(conn: Connection, receipt_query_limit: int, limit: int) -> list[str]:
    """Result-unknown requests with receipt queries left."""
    query = queries.outbox_request.TO_SETTLE
    return [str(r) for r in conn.execute(query, {"q": receipt_query_limit, "n": limit}).scalars()]


def revoke_unsent_auto(conn: Connection, customer_id: int, code: str) -> None:
    """A human took over: automatic replies not yet attempted are never sent."""
    conn.execute(
        queries.outbox_request.REVOKE_UNSENT_AUTO,
        {"c": customer_id, "code": code, "at": now_ms()},
    )


def replied_for(conn: Connection, customer_id: int, batch_id: str) -> bool:
    """Whether a turn over this batch registered any reply."""
    query = queries.outbox_request.ANY_FOR_BATCH
    return conn.execute(query, {"c": customer_id, "b": batch_id}).first() is not None


def retried_as(conn: Connection, request_id: str) -> str | None:
    """The operator's retry of a result-unknown request, if there is one."""
    retry: str | None = conn.execute(queries.outbox_request.RETRY_OF, {"r": request_id}).scalar_one_or_none()
    return retry


def reply_parts(conn: Connection, text_id: str) -> list[tuple[str, str, str]]:
    """A reply registered under `text_id`: (request id, content type, state) of its attachments
    in order (`{text_id}-{n}`), then of its text; empty when it was never registered."""
    rows: list[tuple[str, str, str]] = [
        (str(request_id), str(kind), str(state))
        for request_id, kind, state in conn.execute(queries.outbox_request.REPLY_PARTS, {"t": text_id})
    ]
    text = [row for row in rows if row[0] == text_id]
    parts = sorted((row for row in rows if row[0] != text_id), key=lambda row: int(row[0].rsplit("-", 1)[1]))
    return [*parts, *text] if text else []
