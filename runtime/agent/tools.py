"""Model tools. Identity (account, customer, session) comes from the bound turn, never from
arguments; bad arguments come back as a model-readable error, never an exception."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.admission.batches import commit_batch
from runtime.admission.handling import pause_in
from runtime.agent.history import query_history
from runtime.agent.pending_questions import ask
from runtime.agent.repair import Recorded
from runtime.agent.script_clock import REAL_TIME, ConversationClock
from runtime.errors import KefuError, validation_problems
from runtime.memory.engine import SessionMemory
from runtime.outbox.media import AttachmentPolicy, MediaRef, read_media_file, stage_media
from runtime.outbox.recipients import RecipientUnavailable, recipient_of
from runtime.outbox.requests import ReplyCheck, register_outbound, reply_check, reply_parts
from runtime.ports import ToolCall, ToolSpec
from runtime.store import DeliveryStore
from runtime.store.connection import Connection
from runtime.store.leases import Fence, LeaseLost, fenced
from runtime.store.tables import AdmissionBatch, BuyerRead, Customer, OutboundIntent, OutboxRequest


class ImSendMessageArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=4000)
    attachments: list[str] = Field([], max_length=9, description="file names in the attachments folder")
    awaits_answer: bool = Field(
        False,
        description="true when this message asks the customer a question you need answered: it is kept, and "
        "your next turn is reminded of it even after a restart or a human operator's takeover",
    )


IM_SEND_MESSAGE = ToolSpec(
    name="im_send_message",
    description="Send a message to the customer of this conversation. The only way to reach the customer. "
    "Attachments are sent first, in order, one message each, then the text; if one fails, the rest are not sent.",
    parameters=ImSendMessageArgs.model_json_schema(),
)


@dataclass
class ToolOutcome:
    content: str
    is_error: bool = False
    request_id: str | None = None
    ends_turn: bool = False  # the turn ends after this step (the agent handed off)


@dataclass
class TurnBinding:
    """Everything a tool may know about where it runs."""

    store: DeliveryStore
    customer: Customer
    batch: AdmissionBatch
    session_id: str
    account_revision: int
    zone: ZoneInfo
    turn_id: str = ""
    clock: ConversationClock = REAL_TIME  # how the conversation's times read (runtime.agent.script_clock)
    attachments: AttachmentPolicy | None = None  # None: the agent sends text only
    on_registered: Callable[[str], None] = lambda request_id: None
    memory: SessionMemory | None = None  # None: the memory engine is off
    fence: Fence | None = None  # the writer lease: a reply is registered only while it holds
    # The next step's check (runtime.agent.turn), made in passing by a call's write: (call id,
    # the buyer reads not yet delivered); the write itself found the batch still current.
    checked: tuple[str, list[BuyerRead]] | None = None
    # The session log holds the batch and the store was not told yet: the turn's next write
    # commits it in passing (a transaction per turn fewer; a crash before then finds the batch
    # in the log, and its follow-up turn commits it).
    batch_logged: bool = False
    # Set when the caller sends each reply at once (runtime.pipeline.turn in a worker): the
    # reply's registration then begins its first attempt in the same, durable, transaction.
    begin_attempt: Callable[[Connection, OutboxRequest, ReplyCheck], None] | None = None
    # `memory_recall` searches of this turn in a row that matched nothing (runtime.memory.tools).
    recall_misses: int = 0

    def commit_logged(self, conn: Connection) -> None:
        """Inside a write of the turn: commit the batch the log holds, if not done yet."""
        if self.batch_logged:
            commit_batch(conn, self.batch.id)

    @contextmanager
    def write(self, durable: bool = False) -> Iterator[Connection]:
        """A write transaction of the turn: fenced by its lease, and carrying the batch commit."""
        with fenced(self.store, self.fence, durable) as conn:
            self.commit_logged(conn)
            yield conn
        self.batch_logged = False


def _request_id_for(session_id: str, turn_id: str, tool_call_id: str) -> str:
    """Re-running a recorded tool call derives the same id, so it can never send twice. The
    turn is part of the key: a provider may reuse call ids across turns (the rules agent's ids
    count visible messages, and archiving shrinks that count)."""
    key = f"{session_id}\x00{turn_id}\x00{tool_call_id}"
    return "auto-" + hashlib.sha256(key.encode()).hexdigest()[:24]


Args = TypeVar("Args", bound=BaseModel)


def parse_arguments(call: ToolCall, model: type[Args]) -> Args | ToolOutcome:
    """The tool's arguments, or the model-readable error to return instead."""
    try:
        return model.model_validate(json.loads(call.arguments or "{}"))
    except json.JSONDecodeError as error:
        return ToolOutcome(
            f"Error: arguments of {call.name} are not valid JSON ({error.msg}); send a JSON object", True
        )
    except ValidationError as error:
        problems = "; ".join(validation_problems(error, "arguments"))
        return ToolOutcome(f"Error: invalid arguments for {call.name}: {problems}", True)


def _stage_attachments(binding: TurnBinding, conn: Connection, names: list[str]) -> list[MediaRef]:
    policy = binding.attachments
    if policy is None:
        raise KefuError("KEFU_MEDIA_INVALID", "no attachments folder is configured", "send text only")
    return [stage_media(conn, *read_media_file(policy.resolve(name), policy.max_bytes)) for name in names]


def _register_reply(
    binding: TurnBinding, conn: Connection, call: ToolCall, args: ImSendMessageArgs, check: ReplyCheck
) -> tuple[list[OutboxRequest], RecipientUnavailable | None]:
    """Register the attachments in order, then the text, each following the one before.

    Raises KefuError for a bad attachment (the caller's transaction then writes nothing). A
    Wangwang conversation without a known buyer registers the text as refused, unsent.
    """
    customer, batch = binding.customer, binding.batch
    text_id = _request_id_for(binding.session_id, binding.turn_id, call.id)
    assert customer.id is not None  # a loaded row
    text = OutboundIntent(
        request_id=text_id,
        body=args.text,
        customer_id=customer.id,
        account_id=customer.account_id,
        conversation_id=customer.conversation_id,
        origin="auto",
        batch_id=batch.id,
        session_id=binding.session_id,
        tool_call_id=call.id,
        route_generation=batch.route_generation,
        account_revision=binding.account_revision,
        handling_epoch=batch.handling_epoch,
    )
    try:
        recipient = recipient_of(check.recipient)
    except RecipientUnavailable as error:
        return [register_outbound(conn, text, refused=error.code)], error
    media = _stage_attachments(binding, conn, args.attachments) if args.attachments else []
    parts = [
        OutboundIntent.model_validate(
            text.model_dump()
            | {"request_id": f"{text_id}-{n}", "content_type": m.kind, "body": m.file_name, "media_sha256": m.sha256}
        )
        for n, m in enumerate(media, 1)
    ] + [text]
    follows: str | None = None
    requests = []
    for part in parts:
        requests.append(
            register_outbound(conn, part.model_copy(update={"recipient_id": recipient, "follows": follows}))
        )
        follows = part.request_id
    return requests, None


def im_send_message(binding: TurnBinding, call: ToolCall) -> ToolOutcome:
    args = parse_arguments(call, ImSendMessageArgs)
    if isinstance(args, ToolOutcome):
        return args
    customer, batch = binding.customer, binding.batch
    try:
        with binding.write(durable=binding.begin_attempt is not None) as conn:
            route = (batch.route_id, batch.route_generation)
            check = reply_check(conn, customer.id, batch.handling_epoch, batch.id, route, args.text)  # type: ignore[arg-type]
            if not check.current:
                return ToolOutcome(
                    "Error: automatic handling of this customer is paused (KEFU_HANDLING_PAUSED); nothing was sent.",
                    True,
                )
            if check.earlier is not None:
                return ToolOutcome(
                    f"Already sent this exact text for this batch: request {check.earlier}; not sent again.",
                    request_id=check.earlier,
                )
            requests, refused = _register_reply(binding, conn, call, args, check)
            if refused is None and args.awaits_answer:
                ask(conn, requests[-1].request_id, customer.id, args.text)  # type: ignore[arg-type]
            if refused is None and binding.begin_attempt is not None:
                binding.begin_attempt(conn, requests[0], check)  # the later parts wait for the first
            binding.checked = (call.id, check.buyer_reads)
    except LeaseLost:
        raise  # not the model's business: this turn stops, the lease's new holder carries on
    except KefuError as error:  # a bad attachment: nothing of this call was registered
        return ToolOutcome(f"Error: {error.message} ({error.code}); nothing was sent. {error.action}.", True)
    text_id = requests[-1].request_id
    if refused is not None:
        return ToolOutcome(f"Error: IM reply failed ({refused.code} {text_id}): {refused.help_text}", True, text_id)
    for request in requests:
        binding.on_registered(request.request_id)
    queued = _queued([(r.content_type, r.request_id) for r in requests], requests[-1].state)
    return ToolOutcome(queued, request_id=text_id)


def _queued(parts: list[tuple[str, str]], state: str) -> str:
    """im_send_message's answer for the parts (content type, request id) it registered."""
    listed = ", ".join(f"{kind} {request_id}" for kind, request_id in parts)
    note = " in this order; if one fails, the later ones are not sent" if len(parts) > 1 else ""
    return f"Queued for delivery{note}: {listed} (status {state})."


def recorded_sends(store: DeliveryStore, session_id: str) -> Recorded:
    """For repairing a turn cut off mid-call (runtime.agent.repair): the answer an
    `im_send_message` call would have given, from the requests it registered in the outbox
    (their ids derive from the session, turn and call), with their state now."""

    def recorded(turn_id: str, call_id: str, name: str) -> tuple[str, str] | None:
        if name != IM_SEND_MESSAGE.name:
            return None
        text_id = _request_id_for(session_id, turn_id, call_id)
        with store.read() as conn:
            parts = reply_parts(conn, text_id)
        if not parts:
            return None
        return _queued([(kind, request_id) for request_id, kind, _ in parts], parts[-1][2]), text_id

    return recorded


class ImQueryHistoryArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    limit: int = Field(20, ge=1, le=100)
    before: int | None = Field(None, ge=1)


IM_QUERY_HISTORY = ToolSpec(
    name="im_query_history",
    description="Earlier messages of this conversation as labelled lines, oldest first. Pass `before` from the "
    "previous result to page further back.",
    parameters=ImQueryHistoryArgs.model_json_schema(),
)


def im_query_history(binding: TurnBinding, call: ToolCall) -> ToolOutcome:
    args = parse_arguments(call, ImQueryHistoryArgs)
    if isinstance(args, ToolOutcome):
        return args
    with binding.store.read() as conn:
        page = query_history(conn, binding.customer.id, args.limit, args.before, binding.zone, binding.clock)  # type: ignore[arg-type]
    if not page.lines:
        return ToolOutcome("No messages.")
    more = f"\n(older messages: before={page.next_before})" if page.next_before else "\n(start of conversation)"
    return ToolOutcome("\n".join(page.lines) + more)


class ImHandoffArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=500)


IM_HANDOFF = ToolSpec(
    name="im_handoff",
    description="Hand this customer to a human operator: automatic handling pauses until an operator resumes it.",
    parameters=ImHandoffArgs.model_json_schema(),
)


def im_handoff(binding: TurnBinding, call: ToolCall) -> ToolOutcome:
    args = parse_arguments(call, ImHandoffArgs)
    if isinstance(args, ToolOutcome):
        return args
    with binding.write() as conn:  # fenced: a turn that lost the customer's lease hands nothing off
        pause_in(conn, binding.customer.id, f"handoff: {args.reason}", handoff=True)  # type: ignore[arg-type]
    return ToolOutcome(
        "Handed off: automatic handling of this customer is paused for a human operator.", ends_turn=True
    )


Tool = Callable[[TurnBinding, ToolCall], ToolOutcome]
Tools = dict[str, tuple[ToolSpec, Tool]]
TOOLS: Tools = {
    IM_SEND_MESSAGE.name: (IM_SEND_MESSAGE, im_send_message),
    IM_QUERY_HISTORY.name: (IM_QUERY_HISTORY, im_query_history),
    IM_HANDOFF.name: (IM_HANDOFF, im_handoff),
}


def execute(binding: TurnBinding, call: ToolCall, tools: Tools = TOOLS) -> ToolOutcome:
    entry = tools.get(call.name)
    if entry is None:
        return ToolOutcome(f"Error: unknown tool {call.name!r}; available: {', '.join(tools)}", True)
    return entry[1](binding, call)
