"""The outbox (SPEC 3.8): an intent is durable before any platform call, and each request
gets exactly one attempt unless the platform said the message was not submitted.

A second begin for an attempt whose outcome was never recorded (its worker crashed, or the
task was delivered twice) never calls the platform: the request becomes `result-unknown`,
which only evidence settles (the attempt's own late outcome, or a provider receipt query).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Connection

from runtime.errors import KefuError
from runtime.store import DeliveryStore, now_ms
from runtime.store.sql import sql
from runtime.store.tables import OutboxRequest

SETTLED = ("sent", "failed", "revoked", "route-changed")


class OutboundIntent(BaseModel):
    model_config = ConfigDict(extra="forbid")
    request_id: str = Field(min_length=1, max_length=128)
    customer_id: int
    account_id: str
    conversation_id: str
    recipient_id: str | None = None
    origin: Literal["auto", "manual"]
    content_type: Literal["text"] = "text"
    body: str = Field(min_length=1, max_length=20_000)
    batch_id: str | None = None
    session_id: str | None = None
    tool_call_id: str | None = None
    route_generation: int | None = None
    account_revision: int | None = None
    handling_epoch: int | None = None


class OutboundSend(BaseModel):
    """What a transport is asked to deliver. `request_id` doubles as the client reference."""

    model_config = ConfigDict(frozen=True)
    request_id: str
    account_id: str
    conversation_id: str
    recipient_id: str | None
    text: str


class SendReceipt(BaseModel):
    model_config = ConfigDict(frozen=True)
    platform_message_id: str = Field(min_length=1)


class SendFailure(Exception):
    """A transport's classified failure: safe to retry, final, or of unknown outcome."""

    def __init__(self, kind: Literal["not-submitted", "rejected", "unknown"], code: str) -> None:
        self.kind = kind
        self.code = code
        super().__init__(f"{kind}: {code}")


@dataclass(frozen=True)
class AttemptGrant:
    attempt_no: int
    send: OutboundSend


@dataclass(frozen=True)
class AttemptSkipped:
    reason: Literal[
        "unknown-request", "settled", "in-progress", "result-unknown", "revoked", "route-changed", "waiting-for-earlier"
    ]


def register_outbound(conn: Connection, intent: OutboundIntent) -> OutboxRequest:
    """Persist the intent (idempotent on request id) and return the stored request."""
    at = now_ms()
    conn.execute(
        OutboxRequest.__table__.insert()
        .prefix_with("OR IGNORE")
        .values(**intent.model_dump(), state="pending", created_at=at, updated_at=at)
    )
    return load_request(conn, intent.request_id)  # type: ignore[return-value]


def load_request(conn: Connection, request_id: str) -> OutboxRequest | None:
    row = conn.execute(sql("SELECT * FROM outbox_request WHERE request_id = :r"), {"r": request_id}).mappings().first()
    return OutboxRequest.model_validate(dict(row)) if row else None


def find_same_text(conn: Connection, customer_id: int, batch_id: str, body: str) -> str | None:
    """An earlier auto request with this exact text for the same admitted batch, if any."""
    return conn.execute(
        sql(
            "SELECT request_id FROM outbox_request WHERE customer_id = :c AND batch_id = :b AND body = :t"
            " AND origin = 'auto' ORDER BY created_at LIMIT 1"
        ),
        {"c": customer_id, "b": batch_id, "t": body},
    ).scalar_one_or_none()


def _auto_send_is_stale(conn: Connection, request: OutboxRequest) -> str | None:
    row = conn.execute(
        sql(
            "SELECT c.handling_paused, c.handling_epoch, r.generation, r.enabled,"
            " a.connection_intent = 'connected' AND a.authorization = 'ready' FROM customer c"
            " JOIN admission_batch b ON b.customer_id = c.id LEFT JOIN route r ON r.id = b.route_id"
            " JOIN account a ON a.id = c.account_id WHERE c.id = :c AND b.id = :b"
        ),
        {"c": request.customer_id, "b": request.batch_id},
    ).first()
    if row is None:
        return None
    paused, epoch, generation, enabled, account_live = row
    if paused or epoch != request.handling_epoch or not account_live:
        return "revoked"
    if generation != request.route_generation or not enabled:
        return "route-changed"
    return None


def _earlier_in_flight(conn: Connection, request_id: str, customer_id: int) -> bool:
    """Is a request of the same customer registered earlier (rowid order) still pending or sending?"""
    return (
        conn.execute(
            sql(
                "SELECT 1 FROM outbox_request WHERE customer_id = :c AND state IN ('pending', 'sending')"
                " AND rowid < (SELECT rowid FROM outbox_request WHERE request_id = :r) LIMIT 1"
            ),
            {"c": customer_id, "r": request_id},
        ).first()
        is not None
    )


def next_pending(store: DeliveryStore, customer_id: int) -> str | None:
    """The customer's earliest registered request still waiting for its attempt."""
    with store.read() as conn:
        return conn.execute(
            sql(
                "SELECT request_id FROM outbox_request WHERE customer_id = :c AND state = 'pending'"
                " ORDER BY rowid LIMIT 1"
            ),
            {"c": customer_id},
        ).scalar_one_or_none()


def begin_attempt(store: DeliveryStore, request_id: str, owner: str, lease_s: float) -> AttemptGrant | AttemptSkipped:
    at = now_ms()
    with store.write() as conn:
        request = load_request(conn, request_id)
        if request is None:
            return AttemptSkipped("unknown-request")
        if request.state in SETTLED:
            return AttemptSkipped("settled")
        if request.state == "result-unknown":
            return AttemptSkipped("result-unknown")
        last = conn.execute(
            sql(
                "SELECT attempt_no, state, started_at FROM outbox_attempt WHERE request_id = :r"
                " ORDER BY attempt_no DESC LIMIT 1"
            ),
            {"r": request_id},
        ).first()
        if last is not None and last.state == "started":
            if last.started_at > at - int(lease_s * 1000):
                return AttemptSkipped("in-progress")
            _mark(conn, request_id, last.attempt_no, "unknown", "result-unknown", error_code="KEFU_ATTEMPT_ABANDONED")
            return AttemptSkipped("result-unknown")
        if _earlier_in_flight(conn, request_id, request.customer_id):
            return AttemptSkipped("waiting-for-earlier")  # replies reach a customer in registration order
        if request.origin == "auto" and (stale := _auto_send_is_stale(conn, request)):
            conn.execute(
                sql("UPDATE outbox_request SET state = :s, updated_at = :at WHERE request_id = :r"),
                {"s": stale, "at": at, "r": request_id},
            )
            return AttemptSkipped(stale)  # type: ignore[arg-type]
        attempt_no = (last.attempt_no if last else 0) + 1
        conn.execute(
            sql(
                "INSERT INTO outbox_attempt (request_id, attempt_no, state, owner, started_at)"
                " VALUES (:r, :n, 'started', :o, :at)"
            ),
            {"r": request_id, "n": attempt_no, "o": owner, "at": at},
        )
        conn.execute(
            sql("UPDATE outbox_request SET state = 'sending', updated_at = :at WHERE request_id = :r"),
            {"r": request_id, "at": at},
        )
    send = OutboundSend(
        request_id=request.request_id,
        account_id=request.account_id,
        conversation_id=request.conversation_id,
        recipient_id=request.recipient_id,
        text=request.body,
    )
    return AttemptGrant(attempt_no, send)


def _mark(
    conn: Connection,
    request_id: str,
    attempt_no: int,
    attempt_state: str,
    request_state: str,
    platform_message_id: str | None = None,
    error_code: str | None = None,
) -> None:
    at = now_ms()
    conn.execute(
        sql(
            "UPDATE outbox_attempt SET state = :s, finished_at = :at, platform_message_id = :p, error_code = :e"
            " WHERE request_id = :r AND attempt_no = :n"
        ),
        {"s": attempt_state, "at": at, "p": platform_message_id, "e": error_code, "r": request_id, "n": attempt_no},
    )
    conn.execute(
        sql(
            "UPDATE outbox_request SET state = :s, updated_at = :at,"
            " platform_message_id = coalesce(:p, platform_message_id), error_code = :e WHERE request_id = :r"
        ),
        {"s": request_state, "at": at, "p": platform_message_id, "e": error_code, "r": request_id},
    )


def record_sent(store: DeliveryStore, request_id: str, attempt_no: int, receipt: SendReceipt) -> None:
    """The platform accepted the send. Also settles a request marked result-unknown meanwhile."""
    with store.write() as conn:
        _mark(conn, request_id, attempt_no, "sent", "sent", platform_message_id=receipt.platform_message_id)


def record_failure(store: DeliveryStore, request_id: str, attempt_no: int, failure: SendFailure) -> None:
    request_state = {"not-submitted": "pending", "rejected": "failed", "unknown": "result-unknown"}[failure.kind]
    with store.write() as conn:
        _mark(conn, request_id, attempt_no, failure.kind, request_state, error_code=failure.code)


def settle_by_receipt(store: DeliveryStore, request_id: str, receipt: SendReceipt) -> bool:
    """A provider receipt proves a result-unknown request was delivered."""
    with store.write() as conn:
        request = load_request(conn, request_id)
        if request is None or request.state != "result-unknown":
            return False
        attempt_no = conn.execute(
            sql("SELECT max(attempt_no) FROM outbox_attempt WHERE request_id = :r"), {"r": request_id}
        ).scalar_one()
        _mark(conn, request_id, attempt_no, "sent", "sent", platform_message_id=receipt.platform_message_id)
        return True


def confirm_result(
    store: DeliveryStore, request_id: str, delivered: bool, platform_message_id: str | None = None
) -> OutboxRequest:
    """An operator settles a `result-unknown` request after checking the platform."""
    with store.write() as conn:
        request = load_request(conn, request_id)
        if request is None:
            raise KefuError("KEFU_REQUEST_UNKNOWN", f"no outbox request {request_id!r}", "list them with `kefu outbox`")
        if request.state != "result-unknown":
            raise KefuError(
                "KEFU_REQUEST_NOT_UNKNOWN",
                f"request {request_id!r} is {request.state}; only a result-unknown request can be confirmed",
            )
        attempt_no = conn.execute(
            sql("SELECT max(attempt_no) FROM outbox_attempt WHERE request_id = :r"), {"r": request_id}
        ).scalar_one()
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


def list_requests(store: DeliveryStore, state: str | None, limit: int = 50) -> list[OutboxRow]:
    with store.read() as conn:
        rows = conn.execute(
            sql(
                "SELECT request_id, customer_id, conversation_id, origin, state, error_code,"
                " substr(body, 1, 40) AS preview, updated_at FROM outbox_request"
                " WHERE :s IS NULL OR state = :s ORDER BY updated_at DESC LIMIT :n"
            ),
            {"s": state, "n": limit},
        ).mappings()
        return [OutboxRow.model_validate(dict(row)) for row in rows]
