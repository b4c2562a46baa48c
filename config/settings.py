"""Settings for every kefu process.

Sources, highest first: init arguments, `KEFU_*` environment variables (`__` nests), `.env`,
`kefu.toml` in the working directory, defaults. Every bound of the spec is a field constraint,
so a bad value stops startup naming the variable and the allowed range.
"""

from __future__ import annotations

import difflib
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

EMBEDDED_BROKER = "embedded"
SHARD_NAME = r"[a-z0-9][a-z0-9_-]{0,31}"
SHARD_RULE = "must be 1-32 characters of a-z, 0-9, '_' or '-', starting with a letter or digit"
# KEFU_ variables kefu reads itself, outside these settings: the test suite's Redis
# (tests/integration/conftest.py) and the default secret variable of `kefu accounts add`.
OTHER_VARIABLES = frozenset({"KEFU_TEST_REDIS_URL", "KEFU_SETUP_SECRET"})


class _Section(BaseModel):
    # A misspelled nested variable (KEFU_DELIVERY__BUSY_TIMEOUT) is an error, not a silent default.
    model_config = ConfigDict(extra="forbid")


class DeliverySettings(_Section):
    journal_mode: Literal["WAL", "DELETE"] = "WAL"
    busy_timeout_ms: int = Field(2000, ge=1, le=2_147_483_647)
    locking_mode: Literal["NORMAL", "EXCLUSIVE"] = "NORMAL"
    cache_size_kib: int | None = Field(None, ge=1, le=2_147_483_647)
    migration_retry_budget_ms: int = Field(30_000, ge=0, le=600_000)


class AdmissionSettings(_Section):
    batch_size: int = Field(1000, ge=1, le=1000)


class OpenAISettings(_Section):
    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str | None = None
    timeout_s: float = Field(60.0, gt=0, le=600)
    # Attempts per model call; transient failures (429, 5xx, timeouts) back off exponentially.
    max_attempts: int = Field(4, ge=1, le=10)
    retry_backoff_s: float = Field(1.0, ge=0, le=60)
    # The model takes images (checked with the provider when a worker starts): buyers' images go
    # to it as image content for `KEFU_AGENT__IMAGE_ROUNDS` turns; otherwise they read `[image]`.
    vision: bool = False
    # Model calls in flight at once in one worker process; more turns wait for a free slot in
    # the order they asked (one turn per customer at a time, so per customer). A worker whose
    # agent is this provider runs a thread pool this large plus WORKER_THREADS_SPARE by default
    # (worker.celery_app): a turn waiting on the model costs a thread, not a process.
    max_concurrency: int = Field(512, ge=1, le=10_000)


# The top-level agent settings are the profile of every route that names none (SPEC 3.2's
# `agent_preset`); a route may also name it explicitly.
DEFAULT_PROFILE = "default"
PROFILE_NAME = r"[a-z0-9][a-z0-9_-]{0,31}"
PROFILE_RULE = "must be 1-32 characters of a-z, 0-9, '_' or '-', starting with a letter or digit"
# The model's tools a profile may allow (runtime.agent.tools.TOOLS and runtime.memory.tools.
# MEMORY_TOOLS; tests/unit/test_agent_profiles.py keeps the two lists equal).
AGENT_TOOLS = ("im_send_message", "im_query_history", "im_handoff", "memory_recall", "memory_judge", "memory_image")
MEMORY_TOOL_NAMES = frozenset({"memory_recall", "memory_judge", "memory_image"})
PERSONA_FILE_MAX_CHARS = 20_000


class AgentProfileSettings(_Section):
    """A named agent (`[agent.profiles.<name>]`, `KEFU_AGENT__PROFILES__<NAME>__…`) that a route
    chooses by name, so that one shop runs, say, a pre-sales robot and an after-sales group with
    their own prompt and knowledge. What a profile leaves unset is the top-level agent's."""

    persona: str | None = Field(None, min_length=1, max_length=4000)  # the system prompt's first section
    persona_file: Path | None = None  # ... or read from this UTF-8 file (not both)
    knowledge_file: Path | None = None  # the rules agent's FAQ
    provider: Literal["rules", "openai"] | None = None
    # With the openai provider: the model, and the endpoint when it is not KEFU_AGENT__OPENAI__'s.
    model: str | None = Field(None, min_length=1, max_length=200)
    base_url: str | None = Field(None, pattern=r"^https?://")
    api_key: SecretStr | None = None
    # The tools the model is offered (unset: all of them; memory tools only with memory on).
    tools: list[str] | None = None
    # Long-term memory for this profile's customers (only where KEFU_MEMORY__ENABLED is on).
    memory: bool = True

    @field_validator("tools", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        """An environment variable may list them comma-separated as well as in JSON."""
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        unknown = [name for name in value if name not in AGENT_TOOLS]
        if unknown:
            raise ValueError(f"unknown tool(s) {', '.join(unknown)}; the tools are {', '.join(AGENT_TOOLS)}")
        if "im_send_message" not in value:
            raise ValueError("must include im_send_message: without it the agent can never answer a buyer")
        return list(dict.fromkeys(value))

    @field_validator("persona_file", "knowledge_file")
    @classmethod
    def _a_file(cls, value: Path | None) -> Path | None:
        if value is not None and not value.expanduser().is_file():
            raise ValueError(f"{value} is not a file")
        return value.expanduser() if value is not None else None

    @field_validator("persona_file")
    @classmethod
    def _readable_prompt(cls, value: Path | None) -> Path | None:
        if value is not None:
            try:
                text = value.read_text("utf-8").strip()
            except (OSError, UnicodeDecodeError) as error:
                raise ValueError(f"cannot read {value} as UTF-8 text ({type(error).__name__})") from None
            if not 1 <= len(text) <= PERSONA_FILE_MAX_CHARS:
                raise ValueError(f"{value} must hold 1-{PERSONA_FILE_MAX_CHARS} characters of prompt")
        return value

    @model_validator(mode="after")
    def _one_prompt(self) -> AgentProfileSettings:
        if self.persona is not None and self.persona_file is not None:
            raise ValueError("set persona or persona_file, not both")
        return self

    def prompt(self) -> str | None:
        """The profile's own system prompt section (None: the top-level persona)."""
        if self.persona_file is not None:
            return self.persona_file.read_text("utf-8").strip()
        return self.persona


class AgentSettings(_Section):
    provider: Literal["rules", "openai"] = "rules"
    persona: str = Field(
        "你是这家店铺的在线客服：热情、简洁、准确，不编造店铺没有承诺的内容。", min_length=1, max_length=4000
    )
    knowledge_file: Path | None = None
    # Files the agent may attach, named relative to this folder; unset: the agent sends text only.
    attachments_dir: Path | None = None
    max_steps: int = Field(8, ge=1, le=64)
    # One writer per session: a turn holds its customer's lease, renewed every quarter of it by
    # a heartbeat while the turn runs (a model call may take longer). A dead holder's lease
    # lapses within this (at once where its host can see it gone), and its turn goes again.
    turn_lease_s: float = Field(15.0, ge=1, le=86_400)
    context_window_tokens: int | None = Field(None, ge=1000, le=10_000_000)
    # With a vision model: the turns a buyer's image stays in the model's view as an image
    # (older ones read `[image]` again, so a long conversation does not carry every picture).
    image_rounds: int = Field(3, ge=0, le=100)
    # A customer's session ends and a new one begins (long-term memory carries the customer
    # across, runtime.agent.rotation) when its last event is older than this; unset: never.
    session_idle_h: float | None = Field(None, gt=0, le=87_600)
    # ... and when the configured model is not the one the session began with.
    # ... and when the customer's route now names another profile (see `profiles`).
    rotate_on_model_change: bool = True
    openai: OpenAISettings = OpenAISettings()
    # Named agents a route may choose (runtime.agent.profiles); the settings above are the default.
    profiles: dict[str, AgentProfileSettings] = {}

    @property
    def model_name(self) -> str:
        """The model a session's header and request headers name."""
        return "rules" if self.provider == "rules" else f"openai:{self.openai.model or 'default'}"

    @property
    def profile_names(self) -> frozenset[str]:
        """Every profile a route may name, the default one included."""
        return frozenset({DEFAULT_PROFILE, *self.profiles})

    @property
    def uses_openai(self) -> bool:
        """Some profile's turns wait on a model behind the network (worker pool, inline turns)."""
        return self.provider == "openai" or any(self.profile_provider(p) == "openai" for p in self.profiles.values())

    def profile_provider(self, profile: AgentProfileSettings) -> Literal["rules", "openai"]:
        return profile.provider or self.provider

    def profile_openai(self, profile: AgentProfileSettings) -> OpenAISettings:
        """The profile's endpoint: the top-level one with what the profile sets instead."""
        own = {"model": profile.model, "base_url": profile.base_url, "api_key": profile.api_key}
        return self.openai.model_copy(update={k: v for k, v in own.items() if v is not None})

    @field_validator("profiles")
    @classmethod
    def _profile_names(cls, value: dict[str, AgentProfileSettings]) -> dict[str, AgentProfileSettings]:
        for name in value:
            if name == DEFAULT_PROFILE:
                raise ValueError(
                    f"{name!r} is the top-level agent settings' profile: set KEFU_AGENT__… for it, or pick another name"
                )
            if not re.fullmatch(PROFILE_NAME, name):
                raise ValueError(f"profile name {name!r} {PROFILE_RULE}")
        return value

    @model_validator(mode="after")
    def _profiles_complete(self) -> AgentSettings:
        """A profile's provider may be the top-level one: its model settings are checked against
        the provider it ends up with, naming the variable to fix."""
        problems = []
        for name, profile in sorted(self.profiles.items()):
            prefix = f"KEFU_AGENT__PROFILES__{name.upper()}__"
            if self.profile_provider(profile) == "rules":
                stray = [f for f in ("model", "base_url", "api_key") if getattr(profile, f) is not None]
                if stray:
                    problems.append(
                        f"{', '.join(prefix + f.upper() for f in stray)}: only for the openai provider, and profile"
                        f" {name!r} uses rules (set {prefix}PROVIDER=openai, or leave them out)"
                    )
                continue
            endpoint = self.profile_openai(profile)
            missing = [f for f in ("base_url", "api_key", "model") if getattr(endpoint, f) is None]
            if missing:
                problems.append(
                    f"profile {name!r} uses the openai provider and needs "
                    + ", ".join(f"{prefix}{f.upper()} (or KEFU_AGENT__OPENAI__{f.upper()})" for f in missing)
                )
        if problems:
            raise ValueError("; ".join(problems))
        return self


class OutboxSettings(_Section):
    # An attempt older than this without an outcome is presumed dead (its worker crashed).
    attempt_lease_s: float = Field(120.0, ge=0.5, le=3600)
    # Provider receipt queries per result-unknown request before only an operator can settle it.
    receipt_query_limit: int = Field(5, ge=0, le=100)


class ReconcileSettings(_Section):
    interval_s: float = Field(10.0, ge=0.2, le=3600)
    # Work younger than this is left alone: its own broker message is probably still queued.
    grace_s: float = Field(30.0, ge=0, le=3600)


class RetentionSettings(_Section):
    """Days each kind of record is kept (runtime.customers.retention); unset: forever, the default."""

    delivery_days: int | None = Field(None, ge=1, le=36_500)  # settled messages, replies, batches
    media_days: int | None = Field(None, ge=1, le=36_500)  # stored images and files no open send needs
    sessions_days: int | None = Field(None, ge=1, le=36_500)  # ended and damaged session logs
    memory_images_days: int | None = Field(None, ge=1, le=36_500)  # images archived with memories
    interval_s: float = Field(3600.0, ge=10, le=86_400)  # how often beat prunes


class CheckpointSettings(_Section):
    # At most one report per account per interval (SPEC 3.10 checkpoint_interval_ms).
    interval_ms: int = Field(10_000, ge=100, le=3_600_000)
    sink: Literal["log", "http"] = "log"
    http_url: str | None = Field(None, pattern=r"^https?://")
    http_timeout_s: float = Field(5.0, gt=0, le=60)

    @model_validator(mode="after")
    def _http_needs_url(self) -> CheckpointSettings:
        if self.sink == "http" and not self.http_url:
            raise ValueError("sink http needs KEFU_CHECKPOINT__HTTP_URL")
        return self


class AlertSettings(_Section):
    """Notices for humans (a handoff, a send ended failed or result-unknown, a failed listener)
    show in the console; with a webhook they are also POSTed there, at least once each."""

    webhook_url: SecretStr | None = None  # chat webhooks carry their token in the URL: never printed
    webhook_timeout_s: float = Field(5.0, gt=0, le=60)
    interval_s: float = Field(5.0, ge=0.5, le=3600)  # how often beat delivers what was raised
    include_simulated: bool = False  # also POST the alerts of simulated accounts (to try the webhook)

    @field_validator("webhook_url")
    @classmethod
    def _http_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not re.match(r"https?://", value.get_secret_value()):
            raise ValueError("KEFU_ALERTS__WEBHOOK_URL must start with http:// or https://")
        return value


class ListenerSettings(_Section):
    """Reconnect policy of a listener (SPEC 3.11)."""

    reconnect_initial_ms: int = Field(1000, ge=1, le=600_000)
    reconnect_max_ms: int = Field(30_000, ge=1, le=600_000)
    reconnect_max_attempts: int = Field(3, ge=0, le=20)  # 0: no reconnect at all
    reconnect_stable_ms: int = Field(60_000, ge=0, le=3_600_000)  # a run this long restores the budget and delay
    heartbeat_timeout_ms: int = Field(90_000, ge=1000, le=3_600_000)  # silence this long = a dead connection
    supervise_interval_ms: int = Field(2000, ge=50, le=600_000)  # how soon listeners follow account changes
    lease_s: float = Field(30.0, ge=1, le=3600)  # an account's listener lease, renewed on every supervise pass

    @model_validator(mode="after")
    def _max_covers_initial(self) -> ListenerSettings:
        if self.reconnect_max_ms < self.reconnect_initial_ms:
            raise ValueError("KEFU_LISTENER__RECONNECT_MAX_MS must be at least KEFU_LISTENER__RECONNECT_INITIAL_MS")
        return self

    @model_validator(mode="after")
    def _lease_outlives_a_late_renewal(self) -> ListenerSettings:
        # A pass may run late by one interval; a lapsed lease lets a second process listen too.
        if self.lease_s * 1000 <= 2 * self.supervise_interval_ms:
            raise ValueError(
                f"KEFU_LISTENER__LEASE_S ({self.lease_s:g} s) must be longer than twice"
                f" KEFU_LISTENER__SUPERVISE_INTERVAL_MS ({self.supervise_interval_ms} ms), which renews it"
            )
        return self


class SimulatorSettings(_Section):
    # Simulated network latency of a send's response (the platform has already recorded it).
    send_latency_ms: int = Field(0, ge=0, le=60_000)
    # Every send times out (its outcome is unknown to kefu): "after-submit" the platform has it,
    # "before-submit" it never arrived. Exercises result-unknown, receipt queries and retries.
    send_timeouts: Literal["none", "after-submit", "before-submit"] = "none"
    # Every send is refused as throttled (not submitted; try again after a second), as a
    # platform's rate limit would: exercises backoff and replies that wait for their attempt.
    send_throttled: bool = False
    # The listener also pages the platform's echo of every send (as Wangwang's history does):
    # exercises echo classification; off by default, it doubles what benchmarks ingest.
    echoes: bool = False
    # The simulated platform's file (default: in the data dir). Shards on one machine that
    # serve accounts of one simulated shop point it at the same file.
    platform_path: Path | None = None
    # The model playing a paired simulation instance's buyer (`kefu simulate new --persona`);
    # a field left unset takes the agent's (KEFU_AGENT__OPENAI__*).
    buyer: OpenAISettings = OpenAISettings()
    buyer_max_turns: int = Field(12, ge=1, le=200)  # buyer messages before a paired instance stops itself


DINGTALK_SDK_ENDPOINT = "DINGTALK_OPENAPI_ENDPOINT"
_HTTP_URL = r"^https?://"
_HTTP_HOST = r"^https?://[^/\s]+"  # the SDK's endpoint: a scheme and a host at least


def _dingtalk_openapi() -> str:
    """The official dingtalk-stream SDK's own override, DINGTALK_OPENAPI_ENDPOINT (SPEC 7: how a
    test or a proxy points DingTalk clients at another host), when KEFU_DINGTALK__OPENAPI_URL
    does not say. One that is no http(s) URL is left out here and named by load_settings."""
    given = os.environ.get(DINGTALK_SDK_ENDPOINT, "").rstrip("/")
    return given if re.match(_HTTP_HOST, given) else "https://api.dingtalk.com"


class DingTalkSettings(_Section):
    """Where the DingTalk OpenAPI lives (tests point these at a local fake) and how patient to be."""

    # Tokens, Stream tickets, sends, read status.
    openapi_url: str = Field(default_factory=_dingtalk_openapi, pattern=_HTTP_URL)
    oapi_url: str = Field("https://oapi.dingtalk.com", pattern=r"^https?://")  # media upload
    timeout_s: float = Field(10.0, gt=0, le=120)
    ack_wait_s: float = Field(10.0, gt=0, le=60)  # a stream callback waits this long for the broker
    # Read status (SPEC 3.9): at most one query per sent 1:1 message, no polling (20 QPS per app).
    read_status_checks: int = Field(1, ge=0, le=1)  # 1: ask once per sent 1:1 message; 0: never ask
    read_status_interval_s: float = Field(300.0, ge=1, le=86_400)  # how long after the send it is asked

    @property
    def longest_send_s(self) -> float:
        """One send attempt at worst: an access token, a media upload and the send, each timing out."""
        return 3 * self.timeout_s


HOST_LIST = r"^[A-Za-z0-9.\-:, ]*$"  # host names or addresses, comma-separated


def _hosts(listed: str) -> tuple[str, ...]:
    return tuple(host.strip().lower() for host in listed.split(",") if host.strip())


class WangwangSettings(_Section):
    timeout_s: float = Field(10.0, gt=0, le=120)  # per gateway call (long polls get their wait on top)
    # Hosts besides each bridge's own that its media download URLs may name (comma-separated):
    # a bridge that hands out its store's URLs. Any other host, a redirect's too, is refused.
    media_hosts: str = Field("", max_length=4096, pattern=HOST_LIST)
    # Bridges besides those on this host that kefu may call over plain http:// (comma-separated):
    # a bridge on a private network an operator vouches for. Any other needs https://.
    plain_http_hosts: str = Field("", max_length=4096, pattern=HOST_LIST)

    @property
    def media_host_list(self) -> tuple[str, ...]:
        return _hosts(self.media_hosts)

    @property
    def plain_http_host_list(self) -> tuple[str, ...]:
        return _hosts(self.plain_http_hosts)

    @property
    def longest_send_s(self) -> float:
        """One send attempt at worst: a send is one gateway call."""
        return self.timeout_s


class RecallSettings(_Section):
    """FAIR-DRI selection and the recall block's limits (SPEC 5)."""

    first_gen_max: int = Field(10, ge=1, le=100)  # k: picks per round
    rotation_slots: int = Field(2, ge=1, le=99)  # r: of k, kept for low-alpha memories
    max_blocks: int = Field(20, ge=1, le=500)
    max_chars: int = Field(8000, ge=200, le=1_000_000)
    max_window_percent: int = Field(15, ge=1, le=90)
    min_alpha: float = Field(0.0, ge=0, le=1)  # folders of lower alpha never recall (0: no gate)
    round_budget_chars: int = Field(0, ge=0, le=1_000_000)  # text one round may add (0: no budget)
    # Rounds a high-alpha memory trimmed from the block sits out before a match boosts it back.
    cooldown_rounds: int = Field(2, ge=0, le=100)

    @model_validator(mode="after")
    def _slots_within_quota(self) -> RecallSettings:
        if self.rotation_slots >= self.first_gen_max:
            raise ValueError("KEFU_MEMORY__RECALL__ROTATION_SLOTS must be less than KEFU_MEMORY__RECALL__FIRST_GEN_MAX")
        return self


class MemorySettings(_Section):
    """The long-term memory engine (SPEC 5; percentages are of the context window)."""

    enabled: bool = True
    trigger_percent: int = Field(60, ge=10, le=95)  # archive after a turn that ended above this
    compress_percent: int = Field(20, ge=1, le=90)  # share of used context to archive
    release_target_percent: int = Field(50, ge=1, le=94)  # archive at least down to this
    emergency_percent: int = Field(85, ge=10, le=99)  # archive inline before a model step above this
    hard_limit_percent: int = Field(95, ge=10, le=500)  # still above after 2 archives: stop archiving
    target_chunk_chars: int = Field(1200, ge=100, le=100_000)
    max_folders_per_run: int = Field(500, ge=1, le=500)
    max_folders: int = Field(10_000, ge=1, le=1_000_000)  # per customer: an archive past it is refused whole
    small_window_tokens: int = Field(20_000, ge=0, le=10_000_000)
    allow_small_window: bool = False  # archive even when the window is under small_window_tokens
    default_window_tokens: int = Field(
        128_000, ge=1000, le=10_000_000
    )  # when KEFU_AGENT__CONTEXT_WINDOW_TOKENS is unset
    heuristic_after_s: float = Field(600.0, ge=0, le=30 * 86_400)  # pending this long: the heuristic scores it
    judge_task_items: int = Field(20, ge=1, le=100)  # pending folders listed for the model per request
    max_pending: int = Field(200, ge=1, le=100_000)  # a model's backlog past this: the heuristic scores it at once
    recall: RecallSettings = RecallSettings()

    @model_validator(mode="after")
    def _ordered_lines(self) -> MemorySettings:
        if not self.release_target_percent < self.trigger_percent <= self.emergency_percent:
            raise ValueError(
                "need KEFU_MEMORY__RELEASE_TARGET_PERCENT < KEFU_MEMORY__TRIGGER_PERCENT"
                " <= KEFU_MEMORY__EMERGENCY_PERCENT"
            )
        return self


class ConsoleSettings(_Section):
    # The session cookie only over HTTPS: set it when the console is served behind a TLS proxy.
    secure_cookies: bool = False
    # Proxies whose X-Forwarded-For names the client (comma-separated addresses or networks, as
    # uvicorn's --forwarded-allow-ips takes them). None by default: the socket's address is the
    # client's, so no header moves the sign-in throttle's key.
    trusted_proxies: str = Field("", max_length=4096, pattern=r"^[0-9A-Fa-f.:/, *]*$")
    # `/metrics` answers a scrape with `Authorization: Bearer <token>` only (and then names each
    # account in its listener states); without a token it answers loopback clients only.
    metrics_token: SecretStr | None = None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="KEFU_",
        env_nested_delimiter="__",
        env_file=".env",
        toml_file="kefu.toml",
        extra="forbid",
    )

    data_dir: Path = Path("./var")
    broker_url: str = EMBEDDED_BROKER
    # Redis redelivers a message unacked this long: longer than the leases of the work it carries.
    broker_visibility_timeout_s: float = Field(3600.0, ge=1, le=7 * 86_400)
    shard: str = "default"
    # Who serves the shard: every process of one instance (a host's worker, beat, listener and
    # operator commands) shares its lease; a process of another instance waits as a standby.
    instance: str = Field(default_factory=lambda: socket.gethostname() or "kefu", min_length=1, max_length=128)
    shard_lease_s: float = Field(15.0, ge=2, le=300)  # renewed every quarter; lost after 80 % unrenewed
    # How long a worker, beat, listener or console waits at startup for its broker (and the
    # shard lease in it) before it exits with KEFU_BROKER_UNREACHABLE: a supervisor sees a failure.
    broker_unreachable_s: float = Field(30.0, ge=1, le=3600)
    # Beat's routine lines ("Sending due task", an idle housekeeping task's received/succeeded)
    # at info as well: off, an idle worker logs a few lines a minute (worker.celery_app).
    log_routine_tasks: bool = False
    timezone: str = "Asia/Shanghai"
    # The words of the console and of the CLI's output: Simplified Chinese, or English.
    language: Literal["zh_CN", "en"] = "zh_CN"
    media_max_bytes: int = Field(10 * 1024 * 1024, ge=1, le=1024 * 1024 * 1024)
    # A buyer's video (runtime.inbound.media): a phone clip runs past a photo's or a document's size;
    # kept in the delivery store, whose write lock a copy holds while it is written.
    media_video_max_bytes: int = Field(20 * 1024 * 1024, ge=1, le=1024 * 1024 * 1024)
    account_setup_ttl_ms: int = Field(300_000, ge=1_000, le=3_600_000)  # a preview's material lives this long
    delivery: DeliverySettings = DeliverySettings()
    admission: AdmissionSettings = AdmissionSettings()
    agent: AgentSettings = AgentSettings()
    outbox: OutboxSettings = OutboxSettings()
    reconcile: ReconcileSettings = ReconcileSettings()
    retention: RetentionSettings = RetentionSettings()
    simulator: SimulatorSettings = SimulatorSettings()
    checkpoint: CheckpointSettings = CheckpointSettings()
    alerts: AlertSettings = AlertSettings()
    listener: ListenerSettings = ListenerSettings()
    dingtalk: DingTalkSettings = Field(default_factory=DingTalkSettings)  # reads DINGTALK_OPENAPI_ENDPOINT when made
    wangwang: WangwangSettings = WangwangSettings()
    memory: MemorySettings = MemorySettings()
    console: ConsoleSettings = ConsoleSettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, dotenv_settings, TomlConfigSettingsSource(settings_cls))

    @field_validator("data_dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        """A folder (made when first needed); a path that is a file is refused here, before any
        store or broker folder would fail on it."""
        folder = value.expanduser().resolve()
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"{folder} is a file, not a folder")
        return folder

    @field_validator("shard")
    @classmethod
    def _shard_name(cls, value: str) -> str:
        if not re.fullmatch(SHARD_NAME, value):
            raise ValueError(SHARD_RULE)
        return value

    @field_validator("timezone")
    @classmethod
    def _iana_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError("must be an IANA time zone name such as Asia/Shanghai") from None
        return value

    @field_validator("broker_url")
    @classmethod
    def _broker(cls, value: str) -> str:
        if value != EMBEDDED_BROKER and not re.match(r"^(redis|rediss|amqp|pyamqp)://", value):
            raise ValueError("must be 'embedded' or a redis://, rediss:// or amqp:// URL")
        return value

    @model_validator(mode="after")
    def _leases_outlive_their_work(self) -> Settings:
        """A lease shorter than the work under it lets a second worker start the same work while
        the first is still at it: two replies, or two writers on one session log."""
        problems = [problem for rule in LEASE_RULES if (problem := rule(self))]
        if problems:
            raise ValueError("\n  ".join(problems))
        return self

    @property
    def redis_broker(self) -> bool:
        return self.broker_url.startswith(("redis://", "rediss://"))

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def delivery_path(self) -> Path:
        return self.data_dir / f"delivery-{self.shard}.sqlite"

    @property
    def sessions_dir(self) -> Path:
        return self.data_dir / "sessions" / self.shard

    @property
    def memory_path(self) -> Path:
        return self.data_dir / f"memory-{self.shard}.sqlite"

    @property
    def memory_images_dir(self) -> Path:
        return self.data_dir / "memory-images" / self.shard

    @property
    def simulator_path(self) -> Path:
        return self.simulator.platform_path or self.data_dir / "simulator-platform.sqlite"

    @property
    def embedded_broker(self) -> bool:
        return self.broker_url == EMBEDDED_BROKER


def _attempt_lease_covers_a_send(settings: Settings) -> str | None:
    lease = settings.outbox.attempt_lease_s
    sends = {
        f"KEFU_DINGTALK__TIMEOUT_S ({settings.dingtalk.timeout_s:g} s) × 3 calls (token, media upload, send)": (
            settings.dingtalk.longest_send_s
        ),
        f"KEFU_WANGWANG__TIMEOUT_S ({settings.wangwang.timeout_s:g} s)": settings.wangwang.longest_send_s,
    }
    short = [f"{variable} = {send_s:g} s" for variable, send_s in sends.items() if lease <= send_s]
    if not short:
        return None
    return f"KEFU_OUTBOX__ATTEMPT_LEASE_S ({lease:g} s) must be longer than one platform send: " + "; ".join(short)


def _visibility_outlives_the_leases(settings: Settings) -> str | None:
    if not settings.redis_broker:
        return None  # only Redis redelivers on a timeout
    visibility = settings.broker_visibility_timeout_s
    leases = {
        "KEFU_AGENT__TURN_LEASE_S": settings.agent.turn_lease_s,
        "KEFU_OUTBOX__ATTEMPT_LEASE_S": settings.outbox.attempt_lease_s,
    }
    short = [f"{variable} ({lease_s:g} s)" for variable, lease_s in leases.items() if visibility <= lease_s]
    if not short:
        return None
    return f"KEFU_BROKER_VISIBILITY_TIMEOUT_S ({visibility:g} s) must be longer than " + " and ".join(short)


LEASE_RULES = (_attempt_lease_covers_a_send, _visibility_outlives_the_leases)


def setting_variables(model: type[BaseModel] = Settings, prefix: str = "KEFU_") -> list[str]:
    """The variable of every scalar setting, sections flattened (`KEFU_AGENT__OPENAI__MODEL`)."""
    variables: list[str] = []
    for name, field in model.model_fields.items():
        variable, section = prefix + name.upper(), field.annotation
        if isinstance(section, type) and issubclass(section, BaseModel):
            variables += setting_variables(section, variable + "__")
        else:
            variables.append(variable)
    return variables


def _section_variables() -> set[str]:
    return {
        "KEFU_" + name.upper()
        for name, field in Settings.model_fields.items()
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
    }


def _did_you_mean(variable: str) -> str:
    close = difflib.get_close_matches(variable, [*setting_variables(), *OTHER_VARIABLES], n=1, cutoff=0.8)
    return f" (did you mean {close[0]}?)" if close else ""


def _unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """Top-level `KEFU_*` variables that name no setting: pydantic-settings ignores them, so a
    misspelled KEFU_BROKER_URI would silently leave the default broker. Unknown keys inside a
    section (`KEFU_DELIVERY__…`) are the section's own error."""
    known, sections = set(setting_variables()) | OTHER_VARIABLES, _section_variables()
    unknown = []
    for name in sorted(environ):
        variable = name.upper()
        if variable.startswith("KEFU_") and variable not in known and variable.split("__")[0] not in sections:
            unknown.append(f"  {name}: not a kefu setting{_did_you_mean(variable)}")
    return unknown


class SettingsError(Exception):
    """A configuration value is invalid; the message names each variable and its bound."""


def _without_credentials(url: str) -> str:
    """A URL as it may be shown: its user, password and query (a token) left out."""
    parts = urlsplit(url)
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a port that is no number: not shown either
        port = ""
    return urlunsplit((parts.scheme, (parts.hostname or "") + port, parts.path, "", ""))


def masked_url(url: str) -> str:
    """A URL as `kefu config` shows it: where it points, with its credentials and query (a
    token) replaced by `****`, so an operator sees that they are set, never what they are."""
    if "://" not in url:
        return url if not any(mark in url for mark in "@?#") else "****"
    parts = urlsplit(url)
    if parts.username is None and parts.password is None and not parts.query and not parts.fragment:
        return url
    shown = _without_credentials(url)
    if parts.username is not None or parts.password is not None:
        scheme, rest = shown.split("://", 1)
        shown = f"{scheme}://****@{rest}"
    return shown + ("?****" if parts.query else "") + ("#****" if parts.fragment else "")


def _describe(error: ValidationError) -> list[str]:
    lines = []
    for item in error.errors():
        message = item["msg"].removeprefix("Value error, ")
        if not item["loc"]:  # a rule across sections: its message names every variable
            lines.append(f"  {message}")
            continue
        variable = "__".join(str(part).upper() for part in item["loc"])
        variable = variable if variable.startswith("KEFU_") else "KEFU_" + variable  # .env keys keep theirs
        if item["type"] == "extra_forbidden":  # never echo the value: it may be a misplaced secret
            lines.append(f"  {variable}: not a kefu setting{_did_you_mean(variable)}")
            continue
        # Echo only non-secret scalar inputs; never a key, nor a URL's password or query (nor a
        # URL setting's value that is not a URL at all: it may be one with a token, mistyped).
        shown = item.get("input")
        secret = any(word in variable for word in ("KEY", "SECRET", "TOKEN", "PASSWORD")) or (
            variable.endswith("URL") and not (isinstance(shown, str) and "://" in shown)
        )
        if isinstance(shown, str) and "://" in shown:
            shown = _without_credentials(shown)
        value = "" if secret or isinstance(shown, (dict, list)) or shown is None else f" (got {shown!r})"
        lines.append(f"  {variable}{value}: {message}")
    return lines


def load_settings(**overrides: Any) -> Settings:
    """Build the settings or raise SettingsError with one line per bad or unknown variable."""
    problems = _unknown_variables(os.environ)
    endpoint = os.environ.get(DINGTALK_SDK_ENDPOINT)
    if endpoint and not re.match(_HTTP_HOST, endpoint.rstrip("/")):
        problems.append(f"  {DINGTALK_SDK_ENDPOINT} (got {_without_credentials(endpoint)!r}): must be an http(s) URL")
    settings: Settings | None = None
    try:
        settings = Settings(**overrides)
    except ValidationError as error:
        problems += _describe(error)
    if problems or settings is None:
        raise SettingsError("KEFU_CONFIG_INVALID: invalid kefu configuration:\n" + "\n".join(problems))
    return settings
