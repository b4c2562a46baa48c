"""The Services a pipeline step needs (runtime.ports.Services), built around one
MockTransport: a real store, the rules agent, no simulator, no broker."""

from __future__ import annotations

from dataclasses import dataclass, field

from config import Settings
from runtime.agent.profiles import AgentProfile, agent_profile
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.ports import ModelProvider
from runtime.store import DeliveryStore
from transports.mock import MockTransport


@dataclass
class Local:
    """The Services a step needs, built around one MockTransport."""

    settings: Settings
    store: DeliveryStore
    transport: MockTransport = field(default_factory=MockTransport)
    provider: ModelProvider = field(default_factory=lambda: RulesProvider(load_knowledge(None)))
    memory: None = None
    attachments: None = None

    @property
    def transports(self) -> dict[str, MockTransport]:
        return {"simulator": self.transport}  # the shop fixture's account is a simulator account

    def agent_for(self, profile: str | None) -> tuple[AgentProfile, ModelProvider]:
        """The default profile answers with `provider`; a named one with the rules agent of its knowledge."""
        resolved = agent_profile(self.settings.agent, profile)
        if resolved.name == "default":
            return resolved, self.provider
        return resolved, RulesProvider(load_knowledge(resolved.agent.knowledge_file))

    def transport_of(self, account_id: str) -> MockTransport:
        return self.transport

    def shard_of(self, account_id: str) -> str | None:
        return None  # one shard: no directory
