"""Per-process composition of the runtime for one Celery app: store, transports, agent.

Built lazily in each worker process (never before a fork), and once per app.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, NoReturn, TypeVar

from celery import Celery

from config import Settings
from config.settings import DEFAULT_PROFILE
from runtime.accounts.credentials import load_credentials
from runtime.accounts.registry import require_account
from runtime.agent.profiles import AgentProfile, agent_profile, all_profiles
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.errors import KefuError
from runtime.memory.engine import MemoryEngine
from runtime.memory.store import MemoryStore
from runtime.operators.alerts import AlertSink
from runtime.outbox.media import AttachmentPolicy
from runtime.pipeline import resume
from runtime.placement.directory import Rebuilt, discarder, rebuild_directory
from runtime.placement.moves import AccountOnOtherShard
from runtime.placement.shards import customer_id_base
from runtime.ports import ModelProvider, Transport
from runtime.store import DeliveryStore
from runtime.store.leases import lapse_gone_holders
from transports.dingtalk import DingTalkCredentials, DingTalkTransport
from transports.simulator import SimulatedPlatform, SimulatorTransport
from transports.wangwang import WangwangCredentials, WangwangTransport
from worker.alert_sinks import build_alert_sink
from worker.checkpoint_sinks import CheckpointSink, build_sink

if TYPE_CHECKING:
    from worker.coordination import Coordinator

Secrets = TypeVar("Secrets", DingTalkCredentials, WangwangCredentials)


def refuse_start(error: KefuError) -> NoReturn:
    """Stop this worker or beat before it consumes anything: print the code, no traceback.

    SystemExit, unlike an Exception, passes through Celery's signal dispatch (which logs and
    swallows a receiver's Exception) and its bootstep and beat start-up code."""
    print(f"kefu: {error}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def build_provider(settings: Settings) -> ModelProvider:
    """The default profile's provider (the top-level agent settings)."""
    if settings.agent.provider == "openai":
        from transports.llm.openai import OpenAIChatProvider  # openai loads only where it is used

        return OpenAIChatProvider(settings.agent.openai)
    return RulesProvider(load_knowledge(settings.agent.knowledge_file))


ProviderKey = tuple[str | None, ...]


def provider_key(profile: AgentProfile) -> ProviderKey:
    """Profiles with the same key share one provider (its model slots and connections): the
    rules agent of one knowledge file, or one model of one endpoint."""
    agent = profile.agent
    if agent.provider == "rules":
        return ("rules", str(agent.knowledge_file) if agent.knowledge_file else None)
    key = agent.openai.api_key.get_secret_value() if agent.openai.api_key else None
    return ("openai", agent.openai.base_url, agent.openai.model, key)


def build_profile_provider(settings: Settings, profile: AgentProfile) -> ModelProvider:
    """A named profile's provider; the errors of a knowledge file name the profile's variable."""
    if profile.name == DEFAULT_PROFILE:
        return build_provider(settings)
    if profile.agent.provider == "openai":
        from transports.llm.openai import OpenAIChatProvider

        return OpenAIChatProvider(profile.agent.openai)
    own = settings.agent.profiles[profile.name].knowledge_file is not None
    variable = f"KEFU_AGENT__PROFILES__{profile.name.upper()}__KNOWLEDGE_FILE" if own else "KEFU_AGENT__KNOWLEDGE_FILE"
    return RulesProvider(load_knowledge(profile.agent.knowledge_file, variable))


@dataclass
class WorkerRuntime:
    settings: Settings
    pid: int = field(default_factory=os.getpid)
    _platforms: dict[str, str] = field(default_factory=dict)
    _providers: dict[ProviderKey, ModelProvider] = field(default_factory=dict)
    _providers_lock: threading.Lock = field(default_factory=threading.Lock)

    @cached_property
    def store(self) -> DeliveryStore:
        from worker.shard_lease import process_guard  # (imports the coordination clients lazily)

        settings = self.settings
        return DeliveryStore(
            settings.delivery_path,
            settings.delivery,
            guard=process_guard(settings),
            customer_id_base=customer_id_base(settings.shard),
        )

    @property
    def local_agent(self) -> bool:
        """The agent answers from this process, with no network call (every profile's is the rules agent)."""
        return not self.settings.agent.uses_openai

    @cached_property
    def coordination(self) -> Coordinator:
        from worker.coordination import coordinator_for

        return coordinator_for(self.settings)

    @cached_property
    def provider(self) -> ModelProvider:
        return build_provider(self.settings)

    def agent_for(self, profile: str | None) -> tuple[AgentProfile, ModelProvider]:
        """The profile a route names and its provider, built once per process (ProfileUnknown
        when the settings have no such profile)."""
        resolved = agent_profile(self.settings.agent, profile)
        return resolved, self._provider_of(resolved)

    def _provider_of(self, profile: AgentProfile) -> ModelProvider:
        if profile.name == DEFAULT_PROFILE:
            return self.provider
        key = provider_key(profile)
        with self._providers_lock:
            if key not in self._providers:
                default = provider_key(agent_profile(self.settings.agent, None))
                built = self.provider if key == default else build_profile_provider(self.settings, profile)
                self._providers[key] = built
            return self._providers[key]

    @cached_property
    def transports(self) -> dict[str, Transport]:
        options = self.settings.simulator
        simulator = SimulatorTransport(
            SimulatedPlatform(self.settings.simulator_path),
            send_latency_ms=options.send_latency_ms,
            send_timeouts=options.send_timeouts,
            send_throttled=options.send_throttled,
            echoes=options.echoes,
        )
        dingtalk = DingTalkTransport(self.settings.dingtalk, self._credentials(DingTalkCredentials))
        settings = self.settings.wangwang
        wangwang = WangwangTransport(
            self._credentials(WangwangCredentials),
            settings.timeout_s,
            media_hosts=settings.media_host_list,
            plain_http_hosts=settings.plain_http_host_list,
        )
        built: dict[str, Transport] = {"simulator": simulator, "dingtalk": dingtalk, "wangwang": wangwang}
        for transport in built.values():
            atexit.register(transport.close)
        return built

    def _credentials(self, model: type[Secrets]) -> Callable[[str], Secrets]:
        """An account's stored credentials, validated as the transport's model."""
        return lambda account_id: model.model_validate(load_credentials(self.store, account_id))

    @cached_property
    def memory(self) -> MemoryEngine | None:
        settings = self.settings
        if not settings.memory.enabled:
            return None
        return MemoryEngine(
            store=MemoryStore(settings.memory_path),
            settings=settings.memory,
            window_tokens=settings.agent.context_window_tokens or settings.memory.default_window_tokens,
            zone=settings.zone,
            model_scores=settings.agent.provider != "rules",
            images_dir=settings.memory_images_dir,
            attachments_dir=settings.agent.attachments_dir,
        )

    @cached_property
    def checkpoint_sink(self) -> CheckpointSink:
        return build_sink(self.settings.checkpoint)

    @cached_property
    def alert_sink(self) -> AlertSink:
        return build_alert_sink(self.settings.alerts, self.settings.shard)

    @cached_property
    def attachments(self) -> AttachmentPolicy | None:
        folder = self.settings.agent.attachments_dir
        return AttachmentPolicy(folder, self.settings.media_max_bytes) if folder else None

    def transport(self, platform: str) -> Transport:
        try:
            return self.transports[platform]
        except KeyError:
            raise KefuError(
                "KEFU_TRANSPORT_UNAVAILABLE", f"no {platform} transport is built into this worker yet"
            ) from None

    def transport_of(self, account_id: str) -> Transport:
        """The transport of the account's platform (read once per process: it never changes)."""
        platform = self._platforms.get(account_id)
        if platform is None:
            with self.store.read() as conn:
                platform = self._platforms[account_id] = require_account(conn, account_id).platform
        return self.transport(platform)

    def shard_of(self, account_id: str) -> str | None:
        placement = self.coordination.placement(account_id)
        return placement.shard if placement is not None else None

    def rebuild_directory(self) -> Rebuilt:
        """Enter this shard's accounts in the directory again, and end the moves it lost
        (runtime.placement.directory): at start, and from beat."""
        settings = self.settings
        memory = self.memory.store if self.memory is not None else None
        discard = discarder(self.store, memory, settings.sessions_dir, settings.memory_images_dir)
        return rebuild_directory(self.store, self.coordination, settings.shard, resume, discard)

    def check(self) -> None:
        """Fail startup early: open the store (migrate, check PRAGMAs), load the agent, and
        lapse the leases of this host's dead processes (a predecessor killed mid-turn): this
        process runs on their host, which any worker the rescue task reaches may not, so the
        rescue only has to run their turns (runtime.pipeline.rescue).

        The store's connections are closed again: the worker forks its pool and its embedded
        beat after this, and SQLite must never be open across a fork (a child would inherit the
        parent's lock bookkeeping and hang or fail with "locking protocol")."""
        _ = self.store, self.provider, self.memory
        providers = [self._provider_of(profile) for profile in all_profiles(self.settings.agent)]
        lapse_gone_holders(self.store)
        if self.settings.agent.openai.vision and self.settings.agent.uses_openai:
            from transports.llm.openai import OpenAIChatProvider

            for provider in {id(p): p for p in providers}.values():  # each endpoint and model once
                if isinstance(provider, OpenAIChatProvider):
                    provider.check_vision()
        for account_id in self.rebuild_directory().elsewhere:  # what it resumed, the reconciler picks up
            print(f"kefu: {AccountOnOtherShard(account_id)}", file=sys.stderr, flush=True)
        self.store.close()
        if self.memory is not None:
            self.memory.store.close()


def runtime_for(app: Celery) -> WorkerRuntime:
    current = getattr(app, "kefu_runtime", None)
    if current is None or current.pid != os.getpid():
        current = WorkerRuntime(app.kefu_settings)
        app.kefu_runtime = current
    return current
