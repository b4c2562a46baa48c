"""SQLModel mappings of the delivery tables (the DDL itself lives in migrations.py).

tests/unit/test_store.py checks that these mappings and the migrated schema agree. States are
the enums of runtime.states; a Literal or enum column is stored as text (`sa_type`).
"""

from __future__ import annotations

from typing import Literal

from sqlalchemy import Table
from sqlmodel import AutoString, Field, SQLModel

from runtime.states import AttemptState, BatchState, ListenerState, MessageState, OutboxState, PlacementState


def table_of(model: type[SQLModel]) -> Table:
    """The SQLAlchemy table of a `table=True` model: SQLModel sets `__table__` on such a class
    but does not declare it, so `Model.__table__` is untyped."""
    table = getattr(model, "__table__", None)
    if not isinstance(table, Table):
        raise TypeError(f"{model.__name__} is not a table model")
    return table


class Account(SQLModel, table=True):
    __tablename__ = "account"
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


class Route(SQLModel, table=True):
    __tablename__ = "route"
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


class Customer(SQLModel, table=True):
    __tablename__ = "customer"
    id: int | None = Field(default=None, primary_key=True)
    account_id: str
    conversation_id: str
    conversation_type: str
    title: str | None = None
    direct_peer_id: str | None = None
    handling_paused: bool = False
    handling_epoch: int = 0  # +1 on every pause: auto work admitted under an older epoch is stale
    handling_reason: str | None = None
    session_id: str | None = None
    last_activity_at: int


class InboundMessageRow(SQLModel, table=True):
    __tablename__ = "inbound_message"
    id: int | None = Field(default=None, primary_key=True)
    customer_id: int
    account_id: str
    conversation_id: str
    platform_message_id: str
    sender_id: str
    sender_name: str | None = None
    sender_role: str  # external | human-native | human-console | ai
    content_type: str  # text | markdown | image | unsupported
    body: str
    occurred_at: int
    received_at: int
    mention: bool | None = None
    direct_peer_id: str | None = None
    origin: str = "live"  # live | history
    state: MessageState = Field(default=MessageState.PENDING, sa_type=AutoString)
    batch_id: str | None = None


class PageReceipt(SQLModel, table=True):
    __tablename__ = "page_receipt"
    account_id: str = Field(primary_key=True)
    stream_id: str = Field(primary_key=True)
    page_op_id: str = Field(primary_key=True)
    message_count: int
    committed_at: int


class GroupReceipt(SQLModel, table=True):
    __tablename__ = "group_receipt"
    account_id: str = Field(primary_key=True)
    stream_id: str = Field(primary_key=True)
    page_op_id: str = Field(primary_key=True)
    conversation_id: str = Field(primary_key=True)
    committed_at: int


class ProviderCursor(SQLModel, table=True):
    __tablename__ = "provider_cursor"
    account_id: str = Field(primary_key=True)
    stream_id: str = Field(primary_key=True)
    cursor: str = Field(repr=False)
    page_op_id: str
    updated_at: int
    received_id: int | None = None  # the received page whose cursor this is


class ReceivedPage(SQLModel, table=True):
    __tablename__ = "received_page"
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


class DamagedSession(SQLModel, table=True):
    __tablename__ = "damaged_session"
    session_id: str = Field(primary_key=True)
    customer_id: int
    replaced_by: str  # the session the customer continued in
    kept_path: str
    problem: str
    detected_at: int


class AdmissionBatch(SQLModel, table=True):
    __tablename__ = "admission_batch"
    id: str = Field(primary_key=True)
    customer_id: int
    handling_epoch: int
    route_id: str
    route_generation: int
    state: BatchState = Field(default=BatchState.CLAIMED, sa_type=AutoString)
    message_count: int
    created_at: int
    updated_at: int


class OutboundIntent(SQLModel):
    """A message to send, as a turn's tool or an operator asks for it: validated, then
    registered (runtime.outbox.register_outbound). Its row adds what became of it."""

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


class OutboxRequest(OutboundIntent, table=True):
    __tablename__ = "outbox_request"
    state: OutboxState = Field(default=OutboxState.PENDING, sa_type=AutoString)
    platform_message_id: str | None = None
    error_code: str | None = None
    created_at: int
    updated_at: int
    receipt_queries: int = 0


class OutboxAttempt(SQLModel, table=True):
    __tablename__ = "outbox_attempt"
    request_id: str = Field(primary_key=True)
    attempt_no: int = Field(primary_key=True)
    state: AttemptState = Field(default=AttemptState.STARTED, sa_type=AutoString)
    owner: str
    started_at: int
    finished_at: int | None = None
    platform_message_id: str | None = None
    error_code: str | None = None
    shard_token: int | None = None  # the fencing token of the shard lease it was begun under


class Operation(SQLModel, table=True):
    __tablename__ = "operation"
    id: str = Field(primary_key=True)
    kind: str
    result: str  # JSON of what the operation returned
    created_at: int


class Lease(SQLModel, table=True):
    __tablename__ = "lease"
    name: str = Field(primary_key=True)
    owner: str
    expires_at: int
    token: int = 0


class Media(SQLModel, table=True):
    __tablename__ = "media"
    sha256: str = Field(primary_key=True)
    kind: str  # image | file
    mime: str
    file_name: str
    size: int
    data: bytes = Field(repr=False)
    created_at: int


class ReaderWatermark(SQLModel, table=True):
    __tablename__ = "reader_watermark"
    customer_id: int = Field(primary_key=True)
    reader: str = Field(primary_key=True)
    watermark: int  # the newest inbound message id this reader has seen
    updated_at: int


class BuyerRead(SQLModel, table=True):
    __tablename__ = "buyer_read"
    account_id: str = Field(primary_key=True)
    platform_message_id: str = Field(primary_key=True)
    request_id: str
    customer_id: int
    reader_id: str
    read_at: int
    stored_at: int
    delivered_at: int | None = None  # when the bound session got its im/message-read event


class CheckpointState(SQLModel, table=True):
    __tablename__ = "checkpoint_state"
    account_id: str = Field(primary_key=True)
    generation: int = 1  # the local lease generation reports are made under
    rejected_generation: int | None = None  # the sink refused this generation: no reports until resumed
    last_attempt_at: int | None = None
    last_report: str | None = Field(None, repr=False)  # JSON of the last report the sink accepted
    last_reported_at: int | None = None
    failure_class: str | None = None  # the current failure class; None while reports succeed


class InputPause(SQLModel, table=True):
    __tablename__ = "input_pause"
    scope: str = Field(primary_key=True)  # "*" (the whole host) or an account id
    paused_at: int


class HeldPage(SQLModel, table=True):
    __tablename__ = "held_page"
    account_id: str = Field(primary_key=True)
    stream_id: str = Field(primary_key=True)
    page_op_id: str = Field(primary_key=True)
    page: str = Field(repr=False)  # the page's JSON, published again on resume
    held_at: int


class Credential(SQLModel, table=True):
    """A platform account's secrets as JSON; transports validate it into their own model."""

    __tablename__ = "credential"
    account_id: str = Field(primary_key=True)
    secret: str = Field(repr=False)
    updated_at: int


class ReadCheck(SQLModel, table=True):
    """A sent 1:1 message whose read status the platform is still to be asked about."""

    __tablename__ = "read_check"
    request_id: str = Field(primary_key=True)
    due_at: int
    checks_left: int


class ShardFence(SQLModel, table=True):
    """The shard lease's current grant, as this store knows it: writes of any other holder stop."""

    __tablename__ = "shard_fence"
    id: int = Field(default=1, primary_key=True)
    token: int
    owner: str
    granted_at: int


class ShardGrant(SQLModel, table=True):
    """Every grant of the shard lease that reached this store, in token order."""

    __tablename__ = "shard_grant"
    token: int = Field(primary_key=True)
    owner: str
    granted_at: int


class CustomerIdHigh(SQLModel, table=True):
    """The highest customer id given in an id range: new customers continue above it."""

    __tablename__ = "customer_id_high"
    base: int = Field(primary_key=True)
    last: int


class AccountPlacement(SQLModel, table=True):
    """This shard's copy of the account directory's entry (worker.coordination holds the
    directory itself)."""

    __tablename__ = "account_placement"
    account_id: str = Field(primary_key=True)
    shard: str
    generation: int
    state: PlacementState = Field(sa_type=AutoString)
    updated_at: int


class PlacementImport(SQLModel, table=True):
    """An account slice imported under a move's op id: a replay returns `result`."""

    __tablename__ = "placement_import"
    op_id: str = Field(primary_key=True)
    account_id: str
    result: str  # JSON of the ImportResult
    files_done: bool = False  # session logs and memory written after the rows
    imported_at: int
