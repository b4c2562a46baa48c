"""Simulation instances (seed 001 模拟实例): one conversation with a simulated buyer who talks
back, through the real pipeline, before real buyers meet the agent.

A paired instance's buyer is a model (any OpenAI-compatible one) playing a persona, with a
session log of its own beside the agent's; a manual instance's buyer is an operator typing
(`kefu simulate say`). On either, the operator may speak to the agent under test directly
(`kefu simulate operator-dm`): a message in the agent's session that never reaches the buyer.
The instance's state lives with the simulated platform, so it survives restarts: the buyer's
log says where a paired conversation stood, and `resume` goes on from there. Stopping is a
barrier: `stopping` is persisted first, after which the platform takes no more buyer input and
refuses every send to the conversation (a running turn's reply included), then the
conversation settles and the instance is `stopped`, for good.

The buyer's one tool, `im_sim_stop`, ends its own conversation; it takes no arguments, so a
model can never name another instance or conversation.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from config import OpenAISettings, Settings
from runtime.accounts.registry import load_account
from runtime.admission.routes import list_routes
from runtime.agent.operator_dm import OperatorDm, OperatorDmRequest, accept_operator_dm
from runtime.agent.session_log import AssistantMessage, SessionLog, UserMessage
from runtime.customers.summaries import customer_of
from runtime.errors import KefuError
from runtime.outbox.report import ConversationOutcome, conversation_outcome
from runtime.ports import ChatMessage, ModelProvider, ToolSpec
from runtime.store import DeliveryStore
from transports.simulator import SimulatedPlatform
from transports.simulator.platform import InstanceState, InstanceStopped, SimInstance
from transports.simulator.transport import message_ids
from worker.sample_shop import SAMPLE_ROUTE, SAMPLE_SHOP
from worker.simulation import POLL_S, ensure_sample_shop, wait_handled

IM_SIM_STOP = ToolSpec(
    name="im_sim_stop",
    description="End this conversation: you (the buyer) have what you came for, or are giving up.",
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
)
BUYER_RULES = (
    "你在网店的聊天窗口里扮演一位顾客，和店铺客服对话。以下是你的人设：\n{persona}\n\n"
    "每次只发一条顾客会发的消息（不要替客服说话，不要加引号或角色名）。"
    "问题解决了、或者你不想再聊了，就调用 im_sim_stop 结束对话。"
)
OPENING = "（对话开始：请发出你作为顾客的第一条消息。）"
SHOP = "[店铺客服] "
NO_REPLY = "（客服没有回复：已转人工或仍在处理。）"


class SimulationError(KefuError):
    pass


def instance_or_fail(platform: SimulatedPlatform, instance_id: str) -> SimInstance:
    instance = platform.instance(instance_id)
    if instance is None:
        raise SimulationError(
            "KEFU_SIMULATION_UNKNOWN", f"no simulation instance {instance_id!r}", "kefu simulate list"
        )
    return instance


def route_account(store: DeliveryStore, route_id: str) -> str:
    """The simulator account a direct route belongs to (an instance talks to the agent through it)."""
    route = next((r for r in list_routes(store) if r.id == route_id), None)
    if route is None or route.conversation_type != "direct":
        raise SimulationError("KEFU_ROUTE_UNKNOWN", f"no direct route {route_id!r}", "kefu routes list")
    with store.read() as conn:
        account = load_account(conn, route.account_id)
    if account is None or not account.simulated:
        raise SimulationError(
            "KEFU_SIMULATION_REAL_ROUTE", f"route {route_id!r} serves a real account", "use a simulator account's route"
        )
    return route.account_id


def new_instance(
    store: DeliveryStore, platform: SimulatedPlatform, route_id: str, name: str, persona: str | None = None
) -> SimInstance:
    """A paired instance (with the model's `persona`) or a manual one, on a simulator account's
    direct route; the sample shop is made on first use of its route."""
    if persona is not None and not persona.strip():
        raise SimulationError("KEFU_SIMULATION_INVALID", "the persona is empty", "write who the model plays")
    if route_id == SAMPLE_ROUTE:  # made on first use; an operator's own all-route may stand in for it
        ensure_sample_shop(store)
        account_id = SAMPLE_SHOP
    else:
        account_id = route_account(store, route_id)
    if persona is None:
        return platform.new_instance(account_id, "manual", name)
    return platform.new_instance(account_id, "paired", name, persona)


def say_as_buyer(platform: SimulatedPlatform, instance: SimInstance, text: str) -> list[str]:
    """An operator typing as the buyer: only a manual instance's buyer is one."""
    if instance.kind != "manual":
        raise SimulationError(
            "KEFU_SIMULATION_PAIRED", f"{instance.id}'s buyer is its model", "say as the buyer of a manual instance"
        )
    return say(platform, instance, text)


def say(platform: SimulatedPlatform, instance: SimInstance, text: str) -> list[str]:
    """One buyer message into the instance's conversation: its platform message ids."""
    try:
        message = platform.buyer_says(instance.account_id, instance.buyer_id, instance.buyer_name, text)
    except InstanceStopped as stopped:
        raise SimulationError(
            "KEFU_SIMULATION_STOPPED", f"{instance.id} is {platform_state(platform, instance)}: {stopped}"
        ) from None
    return message_ids(message)


def operator_dm(
    store: DeliveryStore, platform: SimulatedPlatform, instance: SimInstance, text: str, request_id: str
) -> OperatorDm:
    """The operator speaks to the agent under test (seed 001 `injectSimulationOperator`): a plain
    message in its session, never reaching the buyer. The caller then hands `Admit(customer_id)`
    to the workers. Refused once the instance is stopping, and before the buyer said anything
    (there is no conversation for the agent to run yet)."""
    current = instance_or_fail(platform, instance.id)
    if current.state != InstanceState.RUNNING:
        raise SimulationError("KEFU_SIMULATION_STOPPED", f"{instance.id} is {current.state.value}")
    customer_id = customer_of(store, instance.account_id, instance.conversation_id)
    if customer_id is None:
        raise SimulationError(
            "KEFU_SIMULATION_NO_CONVERSATION",
            f"{instance.id}'s buyer has not said anything yet",
            "let the buyer speak first (kefu simulate say for a manual instance)",
        )
    return accept_operator_dm(store, OperatorDmRequest(customer_id=customer_id, request_id=request_id, text=text))


def platform_state(platform: SimulatedPlatform, instance: SimInstance) -> str:
    return instance_or_fail(platform, instance.id).state.value


def stop(store: DeliveryStore, platform: SimulatedPlatform, instance: SimInstance, timeout_s: float) -> SimInstance:
    """The stop barrier, idempotent: `stopping` persisted first (no more buyer input, every send
    to the conversation refused from here on), then, once nothing is in flight for the
    conversation, `stopped`. A timeout leaves it `stopping`: stop again to finish."""
    platform.set_instance_state(instance.number, InstanceState.STOPPING)
    said = {i for message in platform.buyer_messages_in(instance.conversation_id) for i in message_ids(message)}
    deadline = time.monotonic() + timeout_s
    while not _quiet(conversation_outcome(store, instance.account_id, instance.conversation_id), said):
        if time.monotonic() > deadline:
            raise SimulationError(
                "KEFU_SIMULATION_STOP_TIMEOUT",
                f"{instance.id} is stopping; its conversation still has work in flight",
                f"kefu simulate stop {instance.id} again",
            )
        time.sleep(POLL_S)
    return platform.set_instance_state(instance.number, InstanceState.STOPPED)


def _quiet(outcome: ConversationOutcome, said: set[str]) -> bool:
    """Every buyer line stored and taken, no turn running, no reply waiting to be sent."""
    return said <= outcome.stored and not outcome.waiting and outcome.settled


def buyer_provider(settings: Settings) -> ModelProvider:
    """The buyer's model: KEFU_SIMULATOR__BUYER__*, each unset field the agent's, except that a
    buyer endpoint of its own never gets the agent's key."""
    buyer, agent = settings.simulator.buyer, settings.agent.openai
    if "base_url" in buyer.model_fields_set and buyer.api_key is None:
        raise SimulationError(
            "KEFU_SIMULATION_BUYER_KEY",
            "KEFU_SIMULATOR__BUYER__BASE_URL is set without KEFU_SIMULATOR__BUYER__API_KEY",
            "give the buyer's endpoint its own key (the agent's is never sent elsewhere)",
        )
    merged = {
        name: getattr(buyer if name in buyer.model_fields_set else agent, name) for name in OpenAISettings.model_fields
    }
    from transports.llm.openai import OpenAIChatProvider  # openai loads only where it is used

    return OpenAIChatProvider(OpenAISettings.model_validate(merged))


def buyer_log_path(settings: Settings, instance: SimInstance) -> Path:
    return settings.data_dir / "simulations" / f"{instance.id}-buyer.jsonl.zst"


@dataclass
class PairedBuyer:
    """The buyer side of a paired instance: think (the model), say, wait for the shop, log."""

    store: DeliveryStore
    platform: SimulatedPlatform
    instance: SimInstance
    provider: ModelProvider
    log_path: Path
    step_timeout_s: float = 60.0
    max_turns: int = 12
    on_line: Callable[[str, str], None] | None = None  # (who, text) as the conversation goes

    def run(self) -> str:
        """Until the buyer ends it, its turns run out, or the instance is stopped; why it ended."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = SessionLog(self.log_path)
        log.load()
        log.open_for_append()
        while True:
            current = instance_or_fail(self.platform, self.instance.id)
            if current.state != InstanceState.RUNNING:
                return current.state.value
            if self._ended(log):  # the buyer ended it, then its process died before the barrier
                stop(self.store, self.platform, current, self.step_timeout_s)
                return "buyer-ended"
            pending = self._unanswered(log)
            if pending is None:
                if self._said_count(log) >= self.max_turns:
                    stop(self.store, self.platform, current, self.step_timeout_s)
                    return "max-turns"
                reply = self.provider.complete(self._history(log), [IM_SIM_STOP])
                if any(call.name == IM_SIM_STOP.name for call in reply.tool_calls):
                    log.append("assistant/message", text="", tool_calls=[c.model_dump() for c in reply.tool_calls])
                    log.flush()
                    stop(self.store, self.platform, current, self.step_timeout_s)
                    return "buyer-ended"
                text = reply.text.strip() or "……"
                log.append("assistant/message", text=text)  # logged first: a restart says it, never twice
                log.flush()
                pending = text
            if self._said_count(log) > self._platform_count():
                try:
                    say(self.platform, current, pending)
                except SimulationError:
                    return "stopped"
                self._show("buyer", pending)
            self._collect(log)

    def _ended(self, log: SessionLog) -> bool:
        last = next((e for e in reversed(log.events) if isinstance(e, AssistantMessage)), None)
        return last is not None and any(call["name"] == IM_SIM_STOP.name for call in last.tool_calls)

    def _history(self, log: SessionLog) -> list[ChatMessage]:
        persona = self.instance.persona or ""
        messages = [ChatMessage(role="system", content=BUYER_RULES.format(persona=persona))]
        messages.append(ChatMessage(role="user", content=OPENING))
        for event in log.events:
            if isinstance(event, AssistantMessage) and event.text:
                messages.append(ChatMessage(role="assistant", content=event.text))
            elif isinstance(event, UserMessage):
                messages.append(ChatMessage(role="user", content=event.text))
        return messages

    def _unanswered(self, log: SessionLog) -> str | None:
        """The buyer's last line when the shop's answer to it is not logged yet."""
        last = next((e for e in reversed(log.events) if isinstance(e, AssistantMessage | UserMessage)), None)
        return last.text if isinstance(last, AssistantMessage) and last.text else None

    def _said_count(self, log: SessionLog) -> int:
        return sum(isinstance(e, AssistantMessage) and bool(e.text) for e in log.events)

    def _platform_count(self) -> int:
        return len(self.platform.buyer_messages_in(self.instance.conversation_id))

    def _collect(self, log: SessionLog) -> None:
        """Wait for the shop to handle the buyer's last line, then log what it sent since."""
        last = self.platform.buyer_messages_in(self.instance.conversation_id)[-1]
        wait_handled(
            self.store,
            self.instance.account_id,
            self.instance.conversation_id,
            message_ids(last),
            True,
            self.step_timeout_s,
        )
        logged = {ref for e in log.events if isinstance(e, UserMessage) for ref in e.source.split(",") if ref}
        new = [s for s in self.platform.received_in(self.instance.conversation_id) if s.client_ref not in logged]
        text = "\n".join(SHOP + s.text for s in new) or NO_REPLY
        log.append("user/message", source=",".join(s.client_ref for s in new), text=text)
        log.flush()
        for send in new:
            self._show("shop", send.text)

    def _show(self, who: str, text: str) -> None:
        if self.on_line is not None:
            self.on_line(who, text)
