"""SQLModel mappings of the delivery tables (the DDL itself lives in migrations.py).

Each table is two classes: the row's model (`Customer`), which a loaded row validates into, and
its mapping (`CustomerTable`), for `table_of`. A `table=True` model validates some thirty times
slower (SQLAlchemy instruments every field it sets), and kefu loads rows on every step.

tests/unit/test_store.py checks that these mappings and the migrated schema agree. States are
the enums of runtime.store.states; a Literal or enum column is stored as text (`sa_type`).
"""

from __future__ import annotations

from typing import Literal

from sqlalchemy import Table
from sqlmodel import AutoString, Field, SQLModel

from runtime.store.states import (
    AttemptState,
    BatchState,
    ListenerState,
    MessageState,
    OutboxState,
    PlacementState,
    RotationReason,
    SessionOrigin,
)


def table_of(model: type[SQLModel]) -> Table:
    """The SQLAlchemy table of a `table=True` model: SQLModel sets `__table__` on such a class
    but does not declare it, so `Model.__table__` is untyped."""
    table = getattr(model, "__table__", None)
    if not isinstance(table, Table):
        raise TypeError(f"{model.__name__} is not a table model")
    return table


class Account(SQLModel):
    id: str = Field(primary_key=True)
    platform: str
    identity: str
    workspace: str = "default"
    revision: int = 1
    connection_intent: str = "connected"
    authorization: str = "ready"
    listener_state: ListenerState = Field(default=ListenerState.STOPPED, sa_type=AutoString)
    last_error: str | None = None
    simulated: bool = False
    created_at: int
    deleted_at: int | None = None  # a tombstone: routes and credentials are gone, history stays


class AccountTable(Account, table=True):
    __tablename__ = "account"


class Route(SQLModel):
    id: str = Field(primary_key=True)
    account_id: str
    conversation_type: str
    target: str
    conversation_id: str | None = None
    peer_id: str | None = None
    workspace: str = "default"
    enabled: bool = True
    agent_preset: str | None = None
    trigger_mention: bool = False
    trigger_every_n: int | None = None
    trigger_interval_s: int | None = None
    generation: int = 1  # bumped on every change; auto sends freeze the one they were admitted under
    revision: int = 1  # compare-and-set token of route operations
    created_at: int


class RouteTable(Route, table=True):
    __tablename__ = "route"


class Customer(SQLModel):
    id: int | None = Field(default=None, primary_key=True)
    account_id: str
    conversation_id: str
    conversation_type: str
    title: str | None = None
    direct_peer_id: str | None = None
    handling_paused: bool = False
    handling_epoch: int = 0  # +1 on every pause: auto work admitted under an older epoch is stale
    handling_reason: str | None = None
    handed_off: bool = False  # paused by the agent asking for a human, not by an operator
    session_id: str | None = None
    last_activity_at: int


class CustomerTable(Customer, table=True):
    __tablename__ = "customer"


class InboundMessageRow(SQLModel):
    id: int | None = Field(default=None, primary_key=True)
    customer_id: int
    account_id: str
    conversation_id: str
    platform_message_id: str
    sender_id: str
    sender_name: str | None = None
    sender_role: (
        str  # external | human-native | human-console | ai (classified); operator-dm (runtime.agent.operator_dm)
    )
    content_type: str  # text | markdown | image | unsupported
    body: str
    occurred_at: int
    received_at: int
    mention: bool | None = None
    direct_peer_id: str | None = None
    origin: str = "live"  # live | history
    state: MessageState = Field(default=MessageState.PENDING, sa_type=AutoString)
    batch_id: str | None = None
    reply_webhook: str | None = Field(default=None, repr=False)  # JSON; a credential (runtime.outbox.recipients)


class InboundMessageRowTable(InboundMessageRow, table=True):
    __tablename__ = "inbound_message"


class PageReceipt(SQLModel):
    account_id: str = Field(primary_key=True)
    stream_id: str = Field(primary_key=True)
    page_op_id: str = Field(primary_key=True)
    message_count: int
    committed_at: int


class PageReceiptTable(PageReceipt, table=True):
    __tablename__ = "page_receipt"


class GroupReceipt(SQLModel):
    account_id: str = Field(primary_key=True)
    stream_id: str = Field(primary_key=True)
    page_op_id: str = Field(primary_key=True)
    conversation_id: str = Field(primary_key=True)
    committed_at: int


class GroupReceiptTable(GroupReceipt, table=True):
    __tablename__ = "group_receipt"


class ProviderCursor(SQLModel):
    account_id: str = Field(primary_key=True)
    stream_id: str = Field(primary_key=True)
    cursor: str = Field(repr=False)
    page_op_id: str
    updated_at: int
    received_id: int | None = None  # the received page whose cursor this is


class ProviderCursorTable(ProviderCursor, table=True):
    __tablename__ = "provider_cursor"


class ReceivedPage(SQLModel):
    id: int | None = Field(default=None, primary_key=True)
    account_id: str
    stream_id: str
    page_op_id: str
    page: str = Field(repr=False)  # the page's JSON: bodies and the provider cursor
    received_at: int
    published_at: int
    publishes: int = 1
    ingested_at: int | None = None
    outcome: str | None = None  # 'ingested' or why the page can never be ingested


class ReceivedPageTable(ReceivedPage, table=True):
    __tablename__ = "received_page"


class DamagedSession(SQLModel):
    session_id: str = Field(primary_key=True)
    customer_id: int
    replaced_by: str  # the session the customer continued in
    kept_path: str
    problem: str
    detected_at: int


class DamagedSessionTable(DamagedSession, table=True):
    __tablename__ = "damaged_session"


class SessionHeader(SQLModel):
    """An agent session's header (seed 002 5.1): written when it begins, never changed."""

    id: str = Field(primary_key=True)
    customer_id: int
    created_at: int
    model: str | None = None
    origin: SessionOrigin = Field(sa_type=AutoString)
    reason: RotationReason | None = Field(default=None, sa_type=AutoString)
    parent: str | None = None
    inherited: int = 0


class SessionHeaderTable(SessionHeader, table=True):
    __tablename__ = "agent_session"


class AdmissionBatch(SQLModel):
    id: str = Field(primary_key=True)
    customer_id: int
    handling_epoch: int
    route_id: str
    route_generation: int
    state: BatchState = Field(default=BatchState.CLAIMED, sa_type=AutoString)
    message_count: int
    created_at: int
    updated_at: int
    model_calls: int = 0  # of the turn's run that finished it
    model_ms: int = 0  # their wall time, waiting for a model slot included


class AdmissionBatchTable(AdmissionBatch, table=True):
    __tablename__ = "admission_batch"


class OutboundIntent(SQLModel):
    """A message to send, as a turn's tool or an operator asks for it: validated, then
    registered (runtime.outbox.requests.register_outbound). Its row adds what became of it."""

    model_config = {"extra": "forbid"}  # SQLModel's own ConfigDict type
    request_id: str = Field(primary_key=True, min_length=1, max_length=128)
    customer_id: int
    account_id: str
    conversation_id: str
    recipient_id: str | None = None
    origin: Literal["auto", "manual"] = Field(sa_type=AutoString)
    content_type: Literal["text", "image", "file"] = Field(default="text", sa_type=AutoString)
    body: str = Field(min_length=1, max_length=20_000)  # the text, or a media message's file name
    media_sha256: str | None = None
    follows: str | None = None  # the earlier part of the same reply: sent only after it was sent
    retry_of: str | None = None  # the result-unknown request an operator's retry replaces
    batch_id: str | None = None
    session_id: str | None = None
    tool_call_id: str | None = None
    route_generation: int | None = None
    account_revision: int | None = None
    handling_epoch: int | None = None
    operator: str | None = None  # the console operator who sent a manual message


class OutboxRequest(OutboundIntent):
    state: OutboxState = Field(default=OutboxState.PENDING, sa_type=AutoString)
    platform_message_id: str | None = None
    error_code: str | None = None
    created_at: int
    updated_at: int
    receipt_queries: int = 0


class OutboxRequestTable(OutboxRequest, table=True):
    __tablename__ = "outbox_request"


class OutboxAttempt(SQLModel):
    request_id: str = Field(primary_key=True)
    attempt_no: int = Field(primary_key=True)
    state: AttemptState = Field(default=AttemptState.STARTED, sa_type=AutoString)
    owner: str
    started_at: int
    finished_at: int | None = None
    platform_message_id: str | None = None
    error_code: str | None = None
    shard_token: int | None = None  # the fencing token of the shard lease it was begun under


class OutboxAttemptTable(OutboxAttempt, table=True):
    __tablename__ = "outbox_attempt"


class Operation(SQLModel):
    id: str = Field(primary_key=True)
    kind: str
    result: str  # JSON of what the operation returned
    created_at: int


class OperationTable(Operation, table=True):
    __tablename__ = "operation"


class Lease(SQLModel):
    name: str = Field(primary_key=True)
    owner: str
    expires_at: int
    token: int = 0


class LeaseTable(Lease, table=True):
    __tablename__ = "lease"


class Media(SQLModel):
    sha256: str = Field(primary_key=True)
    kind: str  # image | file
    mime: str
    file_name: str
    size: int
    data: bytes = Field(repr=False)
    created_at: int


class MediaTable(Media, table=True):
    __tablename__ = "media"


class ReaderWatermark(SQLModel):
    customer_id: int = Field(primary_key=True)
    reader: str = Field(primary_key=True)
    watermark: int  # the newest inbound message id this reader has seen
    updated_at: int


class ReaderWatermarkTable(ReaderWatermark, table=True):
    __tablename__ = "reader_watermark"


class BuyerRead(SQLModel):
    account_id: str = Field(primary_key=True)
    platform_message_id: str = Field(primary_key=True)
    request_id: str
    customer_id: int
    reader_id: str
    read_at: int
    stored_at: int
    delivered_at: int | None = None  # when the bound session got its im/message-read event


class BuyerReadTable(BuyerRead, table=True):
    __tablename__ = "buyer_read"


class CheckpointState(SQLModel):
    account_id: str = Field(primary_key=True)
    generation: int = 1  # the local lease generation reports are made under
    rejected_generation: int | None = None  # the sink refused this generation: no reports until resumed
    last_attempt_at: int | None = None
    last_report: str | None = Field(None, repr=False)  # JSON of the last report the sink accepted
    last_reported_at: int | None = None
    failure_class: str | None = None  # the current failure class; None while reports succeed


class CheckpointStateTable(CheckpointState, table=True):
    __tablename__ = "checkpoint_state"


class InputPause(SQLModel):
    scope: str = Field(primary_key=True)  # "*" (the whole host) or an account id
    paused_at: int


class InputPauseTable(InputPause, table=True):
    __tablename__ = "input_pause"


class HeldPage(SQLModel):
    account_id: str = Field(primary_key=True)
    stream_id: str = Field(primary_key=True)
    page_op_id: str = Field(primary_key=True)
    page: str = Field(repr=False)  # the page's JSON, published again on resume
    held_at: int


class HeldPageTable(HeldPage, table=True):
    __tablename__ = "held_page"


class Credential(SQLModel):
    """A platform account's secrets as JSON; transports validate it into their own model."""

    account_id: str = Field(primary_key=True)
    secret: str = Field(repr=False)
    updated_at: int


class CredentialTable(Credential, table=True):
    __tablename__ = "credential"


class ReadCheck(SQLModel):
    """A sent 1:1 message whose read status the platform is still to be asked about."""

    request_id: str = Field(primary_key=True)
    due_at: int
    checks_left: int


class ReadCheckTable(ReadCheck, table=True):
    __tablename__ = "read_check"


class ShardFence(SQLModel):
    """The shard lease's current grant, as this store knows it: writes of any other holder stop."""

    id: int = Field(default=1, primary_key=True)
    token: int
    owner: str
    granted_at: int


class ShardFenceTable(ShardFence, table=True):
    __tablename__ = "shard_fence"


class ShardGrant(SQLModel):
    """Every grant of the shard lease that reached this store, in token order."""

    token: int = Field(primary_key=True)
    owner: str
    granted_at: int


class ShardGrantTable(ShardGrant, table=True):
    __tablename__ = "shard_grant"


class CustomerIdHigh(SQLModel):
    """The highest customer id given in an id range: new customers continue above it."""

    base: int = Field(primary_key=True)
    last: int


class CustomerIdHighTable(CustomerIdHigh, table=True):
    __tablename__ = "customer_id_high"


class AccountPlacement(SQLModel):
    """This shard's copy of the account directory's entry (worker.coordination holds the
    directory itself)."""

    account_id: str = Field(primary_key=True)
    shard: str
    generation: int
    state: PlacementState = Field(sa_type=AutoString)
    updated_at: int


class AccountPlacementTable(AccountPlacement, table=True):
    __tablename__ = "account_placement"


class PlacementImport(SQLModel):
    """An account slice imported under a move's op id: a replay returns `result`."""

    op_id: str = Field(primary_key=True)
    account_id: str
    result: str  # JSON of the ImportResult
    files_done: bool = False  # session logs and memory written after the rows
    imported_at: int


class PlacementImportTable(PlacementImport, table=True):
    __tablename__ = "placement_import"


class Erasure(SQLModel):
    """The tombstone an erased buyer leaves (runtime.customers.erasure): who, when and how much, never what."""

    erased_customer: int = Field(primary_key=True)
    account_id: str
    conversation_key: str  # sha256 of the conversation id
    conversation_type: str
    through_ms: int  # platform messages of the conversation up to this time are never stored again
    erased_at: int
    operator: str
    counts: str  # JSON of runtime.customers.erasure.ErasureCounts


class ErasureTable(Erasure, table=True):
    __tablename__ = "erasure"
