"""Agent profiles: the named agents a route chooses (SPEC 3.2 `agent_preset`, issue 42).

A shop with a pre-sales robot and an after-sales group needs two agents: each profile has its
own system prompt, knowledge file, provider and model, allowed tools and memory switch, defined
in the settings (`[agent.profiles.<name>]`, config.settings.AgentProfileSettings). The
top-level agent settings are the `default` profile, the one of every route that names none.

A route names its profile in its `agent_preset` column. A name no profile has is refused when
the route is added or changed (KEFU_AGENT_PROFILE_UNKNOWN). A profile that disappears from the
settings later is never a silent fallback: admission keeps the customer's input waiting, says
so with the same code in an alert (once per customer until they are admitted again) and in the
worker log, and `kefu agents list` names the routes and the customers waiting; once the profile
is back, the reconciler admits what waited.

A turn runs with its customer's profile (runtime.agent.turn); the session header records the
profile's name, and a turn under another profile than its session's begins a new session, as a
model change does (runtime.agent.rotation).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass

from config.settings import DEFAULT_PROFILE, MEMORY_TOOL_NAMES, AgentProfileSettings, AgentSettings
from runtime.errors import KefuError
from runtime.operators.alerts import AlertKind, raise_alert
from runtime.store import DeliveryStore, queries
from runtime.store.connection import Connection
from runtime.store.tables import Customer, Route

log = logging.getLogger(__name__)

UNKNOWN = "KEFU_AGENT_PROFILE_UNKNOWN"


@dataclass(frozen=True)
class AgentProfile:
    """One profile as a turn uses it: `agent` is the top-level agent settings with the
    profile's choices in them, so everything a turn reads from its agent settings (the persona,
    the provider, the model and its retries) is the profile's."""

    name: str
    agent: AgentSettings
    tools: tuple[str, ...] | None  # the tools the model may be offered; None: every tool
    memory: bool  # long-term memory for its customers (where the memory engine is enabled)

    @property
    def model_name(self) -> str:
        return self.agent.model_name

    def allows(self, tool: str) -> bool:
        return (self.tools is None or tool in self.tools) and (self.memory or tool not in MEMORY_TOOL_NAMES)

    @property
    def model_scores(self) -> bool:
        """The model scores archived memories itself (`memory_judge`); the rules agent never does."""
        return self.agent.provider != "rules" and self.allows("memory_judge")


def default_profile(agent: AgentSettings) -> AgentProfile:
    return AgentProfile(DEFAULT_PROFILE, agent, None, True)


def _resolved(agent: AgentSettings, name: str, profile: AgentProfileSettings) -> AgentProfile:
    provider = agent.profile_provider(profile)
    effective = agent.model_copy(
        update={
            "provider": provider,
            "persona": profile.prompt() or agent.persona,
            "knowledge_file": profile.knowledge_file or agent.knowledge_file,
            "openai": agent.profile_openai(profile) if provider == "openai" else agent.openai,
            "profiles": {},
        }
    )
    tools = tuple(profile.tools) if profile.tools is not None else None
    return AgentProfile(name, effective, tools, profile.memory)


def agent_profile(agent: AgentSettings, name: str | None) -> AgentProfile:
    """The profile a route names (None: the default); KEFU_AGENT_PROFILE_UNKNOWN if none has that name."""
    if name is None or name == DEFAULT_PROFILE:
        return default_profile(agent)
    profile = agent.profiles.get(name)
    if profile is None:
        raise ProfileUnknown(name, agent.profile_names)
    return _resolved(agent, name, profile)


def all_profiles(agent: AgentSettings) -> list[AgentProfile]:
    """The default profile, then the named ones by name."""
    return [default_profile(agent), *(_resolved(agent, n, p) for n, p in sorted(agent.profiles.items()))]


class ProfileUnknown(KefuError):
    def __init__(self, name: str, known: Collection[str], route_id: str | None = None) -> None:
        self.name = name
        which = f"route {route_id!r} names" if route_id else "no"
        super().__init__(
            UNKNOWN,
            f"{which} agent profile {name!r}{', which is not configured' if route_id else ''}"
            f" (configured: {', '.join(sorted(known))})",
            f"define it in kefu.toml (table agent.profiles.{name}) or with KEFU_AGENT__PROFILES__{name.upper()}__…"
            " variables, or name a configured profile (`kefu agents list`)",
        )


def require_profile(route_id: str, name: str | None, known: Collection[str]) -> None:
    """A route is refused when it names a profile that is not configured (it would never answer)."""
    if name is not None and name != DEFAULT_PROFILE and name not in known:
        raise ProfileUnknown(name, {DEFAULT_PROFILE, *known}, route_id)


# --- a customer's profile -----------------------------------------------------------------


def governing_route(conn: Connection, customer: Customer) -> Route | None:
    """The route that governs the customer's conversation now (as runtime.admission.routes
    resolves it: a specific route beats `all`)."""
    params = {"a": customer.account_id, "t": customer.conversation_type, "c": customer.conversation_id}
    row = conn.execute(queries.route.GOVERNING, params).mappings().first()
    return Route.model_validate(dict(row)) if row else None


def profile_name_of(conn: Connection, customer_id: int) -> str | None:
    """The profile the customer's route names now (None: the default, or no such customer)."""
    row = conn.execute(queries.customer.BY_ID, {"id": customer_id}).mappings().first()
    if row is None:
        return None
    route = governing_route(conn, Customer.model_validate(dict(row)))
    return route.agent_preset if route is not None else None


def customer_profile(store: DeliveryStore, customer_id: int, agent: AgentSettings) -> AgentProfile:
    """The profile of the customer's route now; ProfileUnknown when it names one that is gone."""
    with store.read() as conn:
        name = profile_name_of(conn, customer_id)
    return agent_profile(agent, name)


def report_unknown(conn: Connection, customer: Customer, route: Route) -> None:
    """Inside the caller's write transaction: the customer's route names a profile that is not
    configured, so their input waits. An alert says so once per customer and profile until the
    customer is admitted again (admission asks again on every new message and reconciler pass)."""
    params = {"c": customer.id, "code": UNKNOWN, "kind": AlertKind.PROFILE_UNKNOWN}
    if conn.execute(queries.alert.RAISED_SINCE_LAST_BATCH, params).first() is None:
        raise_alert(conn, AlertKind.PROFILE_UNKNOWN, customer.account_id, customer.id, code=UNKNOWN)


# --- what `kefu agents` shows ---------------------------------------------------------------


@dataclass(frozen=True)
class UnknownProfileRoute:
    """A route naming a profile that is not configured, and the customers whose input waits on it."""

    route: Route
    waiting: list[int]


def routes_by_profile(routes: list[Route]) -> dict[str, list[Route]]:
    """Each named profile's routes (the default's under DEFAULT_PROFILE)."""
    found: dict[str, list[Route]] = {}
    for route in routes:
        found.setdefault(route.agent_preset or DEFAULT_PROFILE, []).append(route)
    return found


def unknown_profile_routes(
    store: DeliveryStore, routes: list[Route], known: Collection[str]
) -> list[UnknownProfileRoute]:
    """The routes naming a profile not in `known`, each with the customers it keeps waiting
    (input pending and this route governing their conversation)."""
    lost = [r for r in routes if r.agent_preset is not None and r.agent_preset not in {DEFAULT_PROFILE, *known}]
    if not lost:
        return []
    waiting: dict[str, list[int]] = {r.id: [] for r in lost}
    with store.read() as conn:
        for account_id in sorted({r.account_id for r in lost}):
            for customer_id in conn.execute(queries.inbound_message.WAITING_CUSTOMERS, {"a": account_id}).scalars():
                row = conn.execute(queries.customer.BY_ID, {"id": customer_id}).mappings().first()
                route = governing_route(conn, Customer.model_validate(dict(row))) if row else None
                if route is not None and route.id in waiting:
                    waiting[route.id].append(int(customer_id))
    return [UnknownProfileRoute(r, waiting[r.id]) for r in lost]
