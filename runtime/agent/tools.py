"""Model tools. Identity (account, customer, session) comes from the bound turn, never from
arguments; bad arguments come back as a model-readable error, never an exception."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.agent.model import ToolCall, ToolSpec
from runtime.handling import is_current, pause_handling
from runtime.history import query_history
from runtime.outbox import OutboundIntent, find_same_text, register_outbound
from runtime.store import DeliveryStore
from runtime.store.tables import AdmissionBatch, Customer


class ImSendMessageArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=4000)
    attachments: list[str] = []


IM_SEND_MESSAGE = ToolSpec(
    name="im_send_message",
    description="Send a message to the customer of this conversation. The only way to reach the customer.",
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
    on_registered: Callable[[str], None] = lambda request_id: None


def request_id_for(session_id: str, tool_call_id: str) -> str:
    """Re-running a recorded tool call derives the same id, so it can never send twice."""
    return "auto-" + hashlib.sha256(f"{session_id}\x00{tool_call_id}".encode()).hexdigest()[:24]


Args = TypeVar("Args", bound=BaseModel)


def _parse(call: ToolCall, model: type[Args]) -> Args | ToolOutcome:
    """The tool's arguments, or the model-readable error to return instead."""
    try:
        return model.model_validate(json.loads(call.arguments or "{}"))
    except json.JSONDecodeError as error:
        return ToolOutcome(
            f"Error: arguments of {call.name} are not valid JSON ({error.msg}); send a JSON object", True
        )
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in error.errors(include_input=False)
        )
        return ToolOutcome(f"Error: invalid arguments for {call.name}: {problems}", True)


def im_send_message(binding: TurnBinding, call: ToolCall) -> ToolOutcome:
    args = _parse(call, ImSendMessageArgs)
    if isinstance(args, ToolOutcome):
        return args
    if args.attachments:
        return ToolOutcome("Error: attachments are not supported yet; send text only", True)
    customer, batch = binding.customer, binding.batch
    with binding.store.write() as conn:
        if not is_current(conn, customer.id, batch.handling_epoch):  # type: ignore[arg-type]
            return ToolOutcome(
                "Error: automatic handling of this customer is paused (KEFU_HANDLING_PAUSED); nothing was sent.", True
            )
        earlier = find_same_text(conn, customer.id, batch.id, args.text)  # type: ignore[arg-type]
        if earlier is not None:
            return ToolOutcome(
                f"Already sent this exact text for this batch: request {earlier}; not sent again.", request_id=earlier
            )
        request = register_outbound(
            conn,
            OutboundIntent(
                request_id=request_id_for(binding.session_id, call.id),
                customer_id=customer.id,  # type: ignore[arg-type]
                account_id=customer.account_id,
                conversation_id=customer.conversation_id,
                recipient_id=customer.direct_peer_id,
                origin="auto",
                body=args.text,
                batch_id=batch.id,
                session_id=binding.session_id,
                tool_call_id=call.id,
                route_generation=batch.route_generation,
                account_revision=binding.account_revision,
                handling_epoch=batch.handling_epoch,
            ),
        )
    binding.on_registered(request.request_id)
    return ToolOutcome(
        f"Queued for delivery: request {request.request_id}, status {request.state}.", request_id=request.request_id
    )


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
    args = _parse(call, ImQueryHistoryArgs)
    if isinstance(args, ToolOutcome):
        return args
    with binding.store.read() as conn:
        page = query_history(conn, binding.customer.id, args.limit, args.before, binding.zone)  # type: ignore[arg-type]
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
    args = _parse(call, ImHandoffArgs)
    if isinstance(args, ToolOutcome):
        return args
    pause_handling(binding.store, binding.customer.id, reason=f"handoff: {args.reason}")  # type: ignore[arg-type]
    return ToolOutcome(
        "Handed off: automatic handling of this customer is paused for a human operator.", ends_turn=True
    )


TOOLS: dict[str, tuple[ToolSpec, Callable[[TurnBinding, ToolCall], ToolOutcome]]] = {
    IM_SEND_MESSAGE.name: (IM_SEND_MESSAGE, im_send_message),
    IM_QUERY_HISTORY.name: (IM_QUERY_HISTORY, im_query_history),
    IM_HANDOFF.name: (IM_HANDOFF, im_handoff),
}


def execute(binding: TurnBinding, call: ToolCall) -> ToolOutcome:
    entry = TOOLS.get(call.name)
    if entry is None:
        return ToolOutcome(f"Error: unknown tool {call.name!r}; available: {', '.join(TOOLS)}", True)
    return entry[1](binding, call)
