"""The delivery tables' rows, one model per table (the DDL itself lives in migrations.py).

A loaded row validates into its model (`Customer`); a model names its table (`__tablename__`)
and writes a whole row through `insert_row` / `update_row`. No model is a SQLAlchemy mapping:
a `table=True` model validates some thirty times slower (SQLAlchemy instruments every field
it sets), and kefu loads rows on every step.

tests/unit/test_store.py checks that these models (`ROWS`) and the migrated schema agree.
States are the enums of runtime.store.states, stored as their text.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import ClassVar, Literal

from sqlmodel import Field, SQLModel

from runtime.store.connection import Connection
from runtime.store.states import (
    AttemptState,
    BatchState,
    ConversationStatus,
    ListenerState,
    MessageState,
    OutboxState,
    PlacementState,
    RotationReason,
    SessionOrigin,
)


def insert_named(table: str, columns: Iterable[str], verb: str = "INSERT") -> str:
    """A row's INSERT by its column names (`:name` parameters): a whole model's, or a row that
    arrives as data (an account slice's, whose columns were checked against the schema)."""
    names = list(columns)
    quoted, params = ", ".join(f'"{c}"' for c in names), ", ".join(f":{c}" for c in names)
    return f"{verb} INTO {table} ({quoted}) VALUES ({params})"


@cache
def _insert(model: type[SQLModel]) -> str:
    return insert_named(str(model.__tablename__), model.model_fields)


@cache
def _update(model: type[SQLModel], key: str) -> str:
    columns = ", ".join(f"{c} = :{c}" for c in model.model_fields if c != key)
    return f"UPDATE {model.__tablename__} SET {columns} WHERE {key} = :{key}"


def insert_row(conn: Connection, row: SQLModel) -> None:
    """Write a new row: every column of its model."""
    conn.execute(_insert(type(row)), row.model_dump())


def update_row(conn: Connection, row: SQLModel, key: str = "id") -> None:
    """Write every column of the row found by its `key`."""
    conn.execute(_update(type(row), key), row.model_dump())


class Account(SQLModel):
    __tablename__: ClassVar[str] = "account"

    id: str
    platform: str
    identity: str
    workspace: str = "default"
    revision: int = 1
    connection_intent: str = "connected"
    authorization: str = "ready"
    listener_state: ListenerState = ListenerState.STOPPED
    last_error: str | None = None
    simulated: bool = False
    created_at: int
    deleted_at: int | None = None  # a tombstone: routes and credentials are gone, history stays


class Route(SQLModel):
    __tablename__: ClassVar[str] = "route"

    id: str
    account_id: str
    conversation_type: str
    target: str
    conversation_id: str | None = None
    peer_id: str | None = None
    workspace: str = "default"
    enabled: bool = True
    agent_preset: str | None = None
    mode: str = "answer"  # answer | observe (listen and store, never answer): runtime.admission.routes
    trigger_mention: bool = False
    trigger_every_n: int | None = None
    trigger_interval_s: int | None = None
    generation: int = 1  # bumped on every change; auto sends freeze the one they were admitted under
    revision: int = 1  # compare-and-set token of route operations
    created_at: int


class Customer(SQLModel):
    __tablename__: ClassVar[str] = "customer"

    id: int | None = None
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
    assignee: str | None = None  # the operator the conversation is assigned to
    status: ConversationStatus = ConversationStatus.OPEN  # as set; queries.customer.EFFECTIVE_STATUS as it reads now
    status_at: int = 0
    status_after: int = 0  # the newest inbound message id when the status was set
    snoozed_until: int | None = None


class InboundMessageRow(SQLModel):
    __tablename__: ClassVar[str] = "inbound_message"

    id: int | None = None
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
    state: MessageState = MessageState.PENDING
    batch_id: str | None = None
    reply_webhook: str | None = Field(default=None, repr=False)  # JSON; a credential (runtime.outbox.recipients)


class PageReceipt(SQLModel):
    __tablename__: ClassVar[str] = "page_receipt"

    account_id: str
    stream_id: str
    page_op_id: str
    message_count: int
    committed_at: int


class GroupReceipt(SQLModel):
    __tablename__: ClassVar[str] = "group_receipt"

    account_id: str
    stream_id: str
    page_op_id: str
    conversation_id: str
    committed_at: int


class ProviderCursor(SQLModel):
    __tablename__: ClassVar[str] = "provider_cursor"

    account_id: str
    stream_id: str
    cursor: str = Field(repr=False)
    page_op_id: str
    updated_at: int
    received_id: int | None = None  # the received page whose cursor this is


class ReceivedPage(SQLModel):
    __tablename__: ClassVar[str] = "received_page"

    id: int | None = None
    account_id: str
    stream_id: str
    page_op_id: str
    page: str = Field(repr=False)  # the page's JSON: bodies and the provider cursor
    received_at: int
    published_at: int
    publishes: int = 1
    ingested_at: int | None = None
    outcome: str | None = None  # 'ingested' or why the page can never be ingested


class DamagedSession(SQLModel):
    __tablename__: ClassVar[str] = "damaged_session"

    session_id: str
    customer_id: int
    replaced_by: str  # the session the customer continued in
    kept_path: str
    problem: str
    detected_at: int


class SessionHeader(SQLModel):
    __tablename__: ClassVar[str] = "agent_session"

    """An agent session's header (seed 002 5.1): written when it begins, never changed."""

    id: str
    customer_id: int
    created_at: int
    model: str | None = None
    origin: SessionOrigin
    reason: RotationReason | None = None
    parent: str | None = None
    inherited: int = 0
    profile: str | None = None  # the agent profile it began under (runtime.agent.profiles); None: the default


class AdmissionBatch(SQLModel):
    __tablename__: ClassVar[str] = "admission_batch"

    id: str
    customer_id: int
    handling_epoch: int
    route_id: str
    route_generation: int
    state: BatchState = BatchState.CLAIMED
    message_count: int
    created_at: int
    updated_at: int
    model_calls: int = 0  # of the turn's run that finished it
    model_ms: int = 0  # their wall time, waiting for a model slot included


class OutboundIntent(SQLModel):
    """A message to send, as a turn's tool or an operator asks for it: validated, then
    registered (runtime.outbox.requests.register_outbound). Its row adds what became of it."""

    model_config = {"extra": "forbid"}  # SQLModel's own ConfigDict type
    request_id: str = Field(min_length=1, max_length=128)
    customer_id: int
    account_id: str
    conversation_id: str
    recipient_id: str | None = None
    origin: Literal["auto", "manual"]
    content_type: Literal["text", "image", "file"] = "text"
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
    __tablename__: ClassVar[str] = "outbox_request"

    state: OutboxState = OutboxState.PENDING
    platform_message_id: str | None = None
    error_code: str | None = None
    created_at: int
    updated_at: int
    receipt_queries: int = 0


class OutboxAttempt(SQLModel):
    __tablename__: ClassVar[str] = "outbox_attempt"

    request_id: str
    attempt_no: int
    state: AttemptState = AttemptState.STARTED
    owner: str
    started_at: int
    finished_at: int | None = None
    platform_message_id: str | None = None
    error_code: str | None = None
    shard_token: int | None = None  # the fencing token of the shard lease it was begun under


class Operation(SQLModel):
    __tablename__: ClassVar[str] = "operation"

    id: str
    kind: str
    result: str  # JSON of what the operation returned
    created_at: int


class Lease(SQLModel):
    __tablename__: ClassVar[str] = "lease"

    name: str
    owner: str
    expires_at: int
    token: int = 0


class Media(SQLModel):
    __tablename__: ClassVar[str] = "media"

    sha256: str
    kind: str  # image | file
    mime: str
    file_name: str
    size: int
    data: bytes = Field(repr=False)
    created_at: int


class ReaderWatermark(SQLModel):
    __tablename__: ClassVar[str] = "reader_watermark"

    customer_id: int
    reader: str
    watermark: int  # the newest inbound message id this reader has seen
    updated_at: int


class BuyerRead(SQLModel):
    __tablename__: ClassVar[str] = "buyer_read"

    account_id: str
    platform_message_id: str
    request_id: str
    customer_id: int
    reader_id: str
    read_at: int
    stored_at: int
    delivered_at: int | None = None  # when the bound session got its im/message-read event


class CheckpointState(SQLModel):
    __tablename__: ClassVar[str] = "checkpoint_state"

    account_id: str
    generation: int = 1  # the local lease generation reports are made under
    rejected_generation: int | None = None  # the sink refused this generation: no reports until resumed
    last_attempt_at: int | None = None
    last_report: str | None = Field(None, repr=False)  # JSON of the last report the sink accepted
    last_reported_at: int | None = None
    failure_class: str | None = None  # the current failure class; None while reports succeed


class InputPause(SQLModel):
    __tablename__: ClassVar[str] = "input_pause"

    scope: str  # "*" (the whole host) or an account id
    paused_at: int


class HeldPage(SQLModel):
    __tablename__: ClassVar[str] = "held_page"

    account_id: str
    stream_id: str
    page_op_id: str
    page: str = Field(repr=False)  # the page's JSON, published again on resume
    held_at: int


class Credential(SQLModel):
    __tablename__: ClassVar[str] = "credential"

    """A platform account's secrets as JSON; transports validate it into their own model."""

    account_id: str
    secret: str = Field(repr=False)
    updated_at: int


class ReadCheck(SQLModel):
    __tablename__: ClassVar[str] = "read_check"

    """A sent 1:1 message whose read status the platform is asked about once (SPEC 3.9)."""

    request_id: str
    due_at: int
    checks_left: int  # always 1 since V28 (once a bounded count of checks)
    queried_at: int | None = None  # marked before the one query is made; then kept as the mark


class ShardFence(SQLModel):
    __tablename__: ClassVar[str] = "shard_fence"

    """The shard lease's current grant, as this store knows it: writes of any other holder stop."""

    id: int = 1
    token: int
    owner: str
    granted_at: int


class ShardGrant(SQLModel):
    __tablename__: ClassVar[str] = "shard_grant"

    """Every grant of the shard lease that reached this store, in token order."""

    token: int
    owner: str
    granted_at: int


class CustomerIdHigh(SQLModel):
    __tablename__: ClassVar[str] = "customer_id_high"

    """The highest customer id given in an id range: new customers continue above it."""

    base: int
    last: int


class AccountPlacement(SQLModel):
    __tablename__: ClassVar[str] = "account_placement"

    """This shard's copy of the account directory's entry (worker.coordination holds the
    directory itself)."""

    account_id: str
    shard: str
    generation: int
    state: PlacementState
    updated_at: int


class PlacementImport(SQLModel):
    __tablename__: ClassVar[str] = "placement_import"

    """An account slice imported under a move's op id: a replay returns `result`."""

    op_id: str
    account_id: str
    result: str  # JSON of the ImportResult
    files_done: bool = False  # session logs and memory written after the rows
    imported_at: int


class Erasure(SQLModel):
    __tablename__: ClassVar[str] = "erasure"

    """The tombstone an erased buyer leaves (runtime.customers.erasure): who, when and how much, never what."""

    erased_customer: int
    account_id: str
    conversation_key: str  # sha256 of the conversation id
    conversation_type: str
    through_ms: int  # platform messages of the conversation up to this time are never stored again
    erased_at: int
    operator: str
    counts: str  # JSON of runtime.customers.erasure.ErasureCounts


# Every table's row model: tests/unit/test_store.py holds them to the migrated schema.
ROWS: tuple[type[SQLModel], ...] = (
    Account,
    Route,
    Customer,
    InboundMessageRow,
    PageReceipt,
    GroupReceipt,
    ProviderCursor,
    ReceivedPage,
    DamagedSession,
    SessionHeader,
    AdmissionBatch,
    OutboxRequest,
    OutboxAttempt,
    Operation,
    Lease,
    Media,
    ReaderWatermark,
    BuyerRead,
    CheckpointState,
    InputPause,
    HeldPage,
    Credential,
    ReadCheck,
    ShardFence,
    ShardGrant,
    CustomerIdHigh,
    AccountPlacement,
    PlacementImport,
    Erasure,
)


class CannedReply(SQLModel):
    __tablename__: ClassVar[str] = "canned_reply"

    """A reply the shop's operators keep for reuse, found by its shortcut after `/`."""

    id: int | None = None
    shortcut: str
    body: str  # may name {buyer} and {operator}
    updated_by: str
    updated_at: int


class OperatorNote(SQLModel):
    __tablename__: ClassVar[str] = "operator_note"

    """A private note between operators on a conversation: never sent, never the agent's."""

    id: int | None = None
    customer_id: int
    account_id: str
    operator: str
    body: str
    created_at: int


class ReportState(SQLModel):
    __tablename__: ClassVar[str] = "report_state"

    """How far the report facts are kept (runtime.operators.reports.facts): one row."""

    id: int = 1
    zone: str  # the shop zone their hours and days are in
    message_id: int  # inbound messages up to this id are counted
    sent_at: int  # replies sent up to this time are placed
    updated_at: int


class ReportActivity(SQLModel):
    __tablename__: ClassVar[str] = "report_activity"

    """A conversation's buyer messages in one hour of the shop's zone."""

    customer_id: int
    hour_at: int
    account_id: str
    day_at: int
    messages: int


class ReplyWait(SQLModel):
    __tablename__: ClassVar[str] = "reply_wait"

    """A buyer's wait for the shop and the reply that ended it, or a reply that ended none."""

    id: int | None = None
    customer_id: int
    account_id: str
    started_at: int | None = None  # None: a reply while nobody waited
    day_at: int | None = None  # the start of started_at's day in the shop's zone
    first_of_day: bool = False
    answered_at: int | None = None  # None: still waiting
    answered_day: int | None = None  # the start of answered_at's day in the shop's zone
    seconds: int | None = None  # an answered wait's reply time as counted (reports.facts.reply_seconds)
    origin: Literal["auto", "manual"] | None = None
    operator: str | None = None
    request_id: str | None = None


class ReportHour(SQLModel):
    __tablename__: ClassVar[str] = "report_hour"

    """An account's buyer messages and conversations in one hour of the shop's zone (V24's
    triggers keep it from report_activity)."""

    hour_at: int
    account_id: str
    messages: int
    conversations: int


class ReportDay(SQLModel):
    __tablename__: ClassVar[str] = "report_day"

    """An account's conversations of a day with a buyer message, by their day before with one
    (V24's triggers keep it from report_activity)."""

    day_at: int
    account_id: str
    since_day: int  # 0: none before
    conversations: int


class ReportReplyTime(SQLModel):
    __tablename__: ClassVar[str] = "report_reply_time"

    """How many waits begun on a day took so many seconds (as counted) to be answered, by the
    reply's origin (V24's triggers keep it from reply_wait)."""

    day_at: int
    origin: Literal["auto", "manual"]
    seconds: int
    account_id: str
    waits: int
    firsts: int  # of them, conversations' first waits of the day


class ReportOperatorTime(SQLModel):
    __tablename__: ClassVar[str] = "report_operator_time"

    """How many waits begun on a day an operator's reply ended in so many seconds (V24's
    triggers keep it from reply_wait)."""

    operator: str  # '' for none (sent from the CLI)
    seconds: int
    account_id: str
    day_at: int
    waits: int


class ReportOperatorEver(SQLModel):
    __tablename__: ClassVar[str] = "report_operator_ever"

    """How many waits an operator's reply ever ended in so many seconds: the reply times a
    period's are looked up by (V24's triggers keep it from reply_wait)."""

    operator: str  # '' for none (sent from the CLI)
    seconds: int
    account_id: str
    waits: int


class ReportOperatorReplies(SQLModel):
    __tablename__: ClassVar[str] = "report_operator_replies"

    """How many manual replies an operator sent on a day (V24's triggers keep it from reply_wait)."""

    day_at: int
    operator: str  # '' for none (sent from the CLI)
    account_id: str
    replies: int


class ReportEvent(SQLModel):
    __tablename__: ClassVar[str] = "report_event"

    """The agent handed a conversation to a human, or an operator resolved one (V24's triggers
    write them with the change)."""

    customer_id: int
    at: int
    kind: Literal["handoff", "resolve"]
    account_id: str
    operator: str | None = None  # who resolved it
    wrote_before: int | None = None  # a handoff's: its conversation's last hour with buyer messages at or before it
    wrote_after: int | None = None  # and its first after it
