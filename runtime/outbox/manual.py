"""Manual sends (SPEC 3.8): an operator's message, under a request id the caller chooses.

The caller keeps the request id, so a lost response is never a reason to send again: replaying
`send_manual` with the same id returns the stored request, `query_manual` reads it, and only an
explicit `retry_manual` with a new id sends a result-unknown message a second time.
Manual sends work while automatic handling is paused (a human took over) but not while the
account cannot deliver. A send may carry the handling epoch its operator saw (the console's form
always does): when the conversation's epoch moved since (another operator took over, the agent
handed off: every pause bumps it), the send is refused and nothing is registered, so nobody
answers a conversation whose handling changed under them without looking again.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from runtime.accounts.registry import require_account
from runtime.admission.batches import load_customer
from runtime.errors import CustomerUnknown, KefuError, RequestUnknown
from runtime.outbox.media import stage_media
from runtime.outbox.recipients import RecipientUnavailable, direct_recipient
from runtime.outbox.requests import load_request, register_outbound, retried_as
from runtime.placement.shards import local_placement
from runtime.store import DeliveryStore
from runtime.store.connection import Connection
from runtime.store.states import PlacementState
from runtime.store.tables import Customer, OutboundIntent, OutboxRequest

_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


class ManualSend(BaseModel):
    """One manual message: text, or one file (a media message carries exactly one file)."""

    model_config = ConfigDict(extra="forbid")
    request_id: str
    customer_id: int
    text: str | None = Field(None, min_length=1, max_length=4000)
    file_name: str | None = Field(None, min_length=1, max_length=255)
    file_data: bytes | None = Field(None, repr=False)
    operator: str | None = None  # the console operator sending it (the CLI sends unnamed)
    # The customer's handling epoch the operator saw; None: send whatever it is now.
    expected_epoch: int | None = Field(None, ge=0)

    @field_validator("request_id")
    @classmethod
    def _request_id(cls, value: str) -> str:
        return check_request_id(value)

    @model_validator(mode="after")
    def _one_content(self) -> ManualSend:
        has_file = self.file_name is not None and self.file_data is not None
        if (self.text is None) == (not has_file):
            raise ValueError("give either text or a file (one file per media message)")
        return self


def message_parts(
    request_id: str,
    customer_id: int,
    text: str | None,
    file: tuple[bytes, str] | None = None,
    operator: str | None = None,
    expected_epoch: int | None = None,
) -> list[ManualSend]:
    """An operator's message as the requests it goes out in: its file first (`<id>.file`), then
    its text (`<id>`), each expecting the handling epoch the operator saw. Neither is a
    ManualSend that does not validate."""
    parts = []
    if file is not None:
        data, name = file
        parts.append(
            ManualSend(
                request_id=f"{request_id}.file",
                customer_id=customer_id,
                file_name=name,
                file_data=data,
                operator=operator,
                expected_epoch=expected_epoch,
            )
        )
    if text is not None or file is None:
        parts.append(
            ManualSend(
                request_id=request_id,
                customer_id=customer_id,
                text=text,
                operator=operator,
                expected_epoch=expected_epoch,
            )
        )
    return parts


def check_request_id(value: str) -> str:
    if not _REQUEST_ID.fullmatch(value):
        raise KefuError(
            "KEFU_REQUEST_ID_INVALID",
            f"request id {value[:40]!r} is not 1-128 characters of letters, digits, '.', '_', ':' or '-'",
            "choose a stable id such as console-<date>-<n>; keep it to query or confirm the send",
        )
    return value


def _customer(conn: Connection, customer_id: int) -> Customer:
    customer = load_customer(conn, customer_id)
    if customer is None:
        raise CustomerUnknown(customer_id)
    return customer


def _why_account_cannot_send(conn: Connection, account_id: str) -> str | None:
    account = require_account(conn, account_id)
    if account.connection_intent != "connected":
        return "is disconnected"
    if account.authorization != "ready":
        return f"is not authorised ({account.authorization})"
    if account.listener_state == "failed":
        return "has a failed listener"
    placement = local_placement(conn, account_id)
    if placement is not None and placement.state != PlacementState.ACTIVE:
        return f"is moving to another shard ({placement.state}); send from its new shard once the move is done"
    return None


def _check_account_can_send(conn: Connection, customer: Customer) -> None:
    if problem := _why_account_cannot_send(conn, customer.account_id):
        raise KefuError(
            "KEFU_ACCOUNT_UNAVAILABLE",
            f"account {customer.account_id!r} {problem}; no manual send was registered",
            "reconnect or re-authorise the account, then send again",
        )


_SAME_MESSAGE = ("customer_id", "content_type", "body", "media_sha256", "retry_of")


def _replayed(existing: OutboxRequest, wanted: OutboundIntent) -> OutboxRequest:
    """The same request id again: the stored request if it is the same message, else an error."""
    if existing.origin != "manual" or any(getattr(existing, f) != getattr(wanted, f) for f in _SAME_MESSAGE):
        raise KefuError(
            "KEFU_REQUEST_ID_CONFLICT",
            f"request id {existing.request_id!r} already names a different message",
            "use a new request id for a new message; reuse an id only to repeat the same send",
        )
    return existing


class HandlingEpochChanged(KefuError):
    def __init__(self, customer: Customer, expected: int) -> None:
        now = "paused" if customer.handling_paused else "handled automatically"
        super().__init__(
            "KEFU_HANDLING_EPOCH_CHANGED",
            f"customer {customer.id}'s handling changed since it was looked at (epoch {expected}, now"
            f" {customer.handling_epoch}: {now}); no manual send was registered",
            "look at the conversation again (who handles it now), then send with its current epoch",
        )


def _register(
    conn: Connection, customer: Customer, intent: OutboundIntent, expected_epoch: int | None = None
) -> OutboxRequest:
    """A replayed request id returns the stored request (sent under the epoch of its time);
    a new one is refused when the operator saw another handling epoch than the customer's."""
    existing = load_request(conn, intent.request_id)
    if existing is not None:
        return _replayed(existing, intent)
    if expected_epoch is not None and expected_epoch != customer.handling_epoch:
        raise HandlingEpochChanged(customer, expected_epoch)
    _check_account_can_send(conn, customer)
    try:
        recipient = direct_recipient(conn, intent.customer_id)  # the customer's id
    except RecipientUnavailable as error:
        return register_outbound(conn, intent, refused=error.code)  # recorded, never submitted
    return register_outbound(conn, intent.model_copy(update={"recipient_id": recipient}))


def send_manual(store: DeliveryStore, send: ManualSend) -> OutboxRequest:
    """Register an operator's message. Idempotent on the request id."""
    return send_manual_parts(store, [send])[0]


def send_manual_parts(store: DeliveryStore, parts: list[ManualSend]) -> list[OutboxRequest]:
    """Register the parts of one operator message (e.g. a file, then its text) in one
    transaction: all or none (a part refused for a moved handling epoch registers none). Each
    part is submitted only after the one before was sent."""
    with store.write() as conn:
        registered: list[OutboxRequest] = []
        for send in parts:
            customer = _customer(conn, send.customer_id)
            content: dict[str, object] = {"content_type": "text", "body": send.text}
            if send.file_data is not None:
                media = stage_media(conn, send.file_data, send.file_name)  # type: ignore[arg-type]
                content = {"content_type": media.kind, "body": media.file_name, "media_sha256": media.sha256}
            intent = OutboundIntent(
                request_id=send.request_id,
                customer_id=send.customer_id,  # = customer.id, which SQLModel types as optional
                account_id=customer.account_id,
                conversation_id=customer.conversation_id,
                origin="manual",
                handling_epoch=customer.handling_epoch,
                follows=registered[-1].request_id if registered else None,
                operator=send.operator,
                **content,  # type: ignore[arg-type]
            )
            registered.append(_register(conn, customer, intent, send.expected_epoch))
        return registered


def query_manual(store: DeliveryStore, request_id: str) -> OutboxRequest:
    """The stored request (a provider receipt query is the worker's: `kefu outbox query`)."""
    with store.read() as conn:
        request = load_request(conn, check_request_id(request_id))
    if request is None:
        raise RequestUnknown(request_id)
    return request


def retry_manual(
    store: DeliveryStore, new_request_id: str, previous_request_id: str, operator: str | None = None
) -> OutboxRequest:
    """Send a result-unknown message again under a new id, recording which one it retries.

    Only an operator decides this (the first may have arrived after all); each unknown request
    can be retried once. Replaying the same pair returns the stored retry.
    """
    check_request_id(new_request_id)
    with store.write() as conn:
        previous = load_request(conn, check_request_id(previous_request_id))
        if previous is None:
            raise RequestUnknown(previous_request_id)
        if load_request(conn, new_request_id) is None:  # a first call, not a replay
            if previous.state != "result-unknown":
                raise KefuError(
                    "KEFU_RETRY_NEEDS_UNKNOWN",
                    f"request {previous_request_id!r} is {previous.state};"
                    " only a result-unknown request can be retried",
                    "a sent request needs nothing; a failed one can be sent anew with `kefu send`",
                )
            earlier_retry = retried_as(conn, previous_request_id)
            if earlier_retry is not None:
                raise KefuError(
                    "KEFU_RETRY_EXISTS",
                    f"request {previous_request_id!r} was already retried as {earlier_retry!r}",
                    f"check that one with `kefu outbox query {earlier_retry}`",
                )
        customer = _customer(conn, previous.customer_id)
        intent = OutboundIntent(
            request_id=new_request_id,
            customer_id=previous.customer_id,
            account_id=previous.account_id,
            conversation_id=previous.conversation_id,
            origin="manual",
            content_type=previous.content_type,
            body=previous.body,
            media_sha256=previous.media_sha256,
            handling_epoch=customer.handling_epoch,
            retry_of=previous.request_id,
            operator=operator,
        )
        return _register(conn, customer, intent)
