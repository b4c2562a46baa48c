"""Agent profiles: the named agents routes choose (`[agent.profiles.<name>]`, runtime.agent.profiles).

`kefu agents list` shows every profile with the routes that use it, and the routes that name a
profile no longer configured with the customers whose input waits on them; `kefu agents show
NAME` one profile's settings and its system prompt. An API key is never printed: only whether
one is set; an endpoint's URL is shown without its credentials.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import BaseModel

from worker.cli.common import (
    N_,
    _,
    cli,
    console,
    current_settings,
    ensure_store,
    operator_errors,
    print_rows,
    print_table,
)

if TYPE_CHECKING:
    from runtime.agent.profiles import AgentProfile
    from runtime.store.tables import Route

agents = typer.Typer(no_args_is_help=True, help="Agent profiles: the agents routes choose.")
cli.add_typer(agents, name="agents")

AsJson = Annotated[bool, typer.Option("--json")]


class ProfileRow(BaseModel):
    """A profile as `kefu agents` shows it: no secret in it."""

    name: str
    provider: str
    model: str
    endpoint: str | None  # the openai base URL, without credentials
    api_key: str | None  # "set" or None: never the key
    knowledge_file: str
    persona: str  # where the system prompt comes from
    tools: str
    memory: str
    routes: str


class UnknownRow(BaseModel):
    route: str
    account: str
    profile: str
    waiting_customers: list[int]


def _routes() -> list[Route]:
    """The shard's routes; none before the store exists (profiles may be set up first)."""
    from runtime.admission.routes import list_routes

    if not current_settings().delivery_path.exists():
        return []
    return list_routes(ensure_store())


def _row(profile: AgentProfile, routes: list[Route]) -> ProfileRow:
    from config.settings import AGENT_TOOLS, DEFAULT_PROFILE, MEMORY_TOOL_NAMES, masked_url

    settings = current_settings()
    agent, own = profile.agent, settings.agent.profiles.get(profile.name)
    openai = agent.provider == "openai"
    engine = settings.memory.enabled
    tools = [t for t in AGENT_TOOLS if profile.allows(t) and (engine or t not in MEMORY_TOOL_NAMES)]
    if own is not None and own.persona_file is not None:
        persona = _("file {path}").format(path=own.persona_file)
    elif own is not None and own.persona is not None:
        persona = _("its own")
    else:
        persona = "KEFU_AGENT__PERSONA" if profile.name == DEFAULT_PROFILE else _("the default's (KEFU_AGENT__PERSONA)")
    if not engine:
        memory = _("off (KEFU_MEMORY__ENABLED=false)")
    else:
        memory = _("on") if profile.memory else _("off")
    return ProfileRow(
        name=profile.name,
        provider=agent.provider,
        model=agent.model_name,
        endpoint=masked_url(agent.openai.base_url) if openai and agent.openai.base_url else None,
        api_key=(_("set") if agent.openai.api_key else _("not set")) if openai else None,
        knowledge_file=(str(agent.knowledge_file) if agent.knowledge_file else _("shipped sample"))
        if not openai
        else "-",
        persona=persona,
        tools=", ".join(tools),
        memory=memory,
        routes=", ".join(r.id for r in routes) or "-",
    )


@agents.command("list")
def list_command(as_json: AsJson = False) -> None:
    """Every agent profile (the default first) with the routes that use it."""
    from runtime.agent.profiles import all_profiles, routes_by_profile, unknown_profile_routes

    settings = current_settings()
    with operator_errors():
        routes = _routes()
        used = routes_by_profile(routes)
        rows = [_row(p, used.get(p.name, [])) for p in all_profiles(settings.agent)]
        lost = unknown_profile_routes(ensure_store(), routes, settings.agent.profile_names) if routes else []
    unknown = [UnknownRow(route=u.route.id, account=u.route.account_id, profile=u.route.agent_preset or "",
                          waiting_customers=u.waiting) for u in lost]  # fmt: skip
    if as_json:
        print(json.dumps({"profiles": [r.model_dump() for r in rows], "unknown": [u.model_dump() for u in unknown]},
                         ensure_ascii=False))  # fmt: skip
        return
    columns = [N_("name"), N_("provider"), N_("model"), N_("knowledge_file"), N_("tools"), N_("memory"), N_("routes")]
    print_rows(rows, False, _("agent profiles"), columns, flexible="tools")
    for problem in unknown:
        waiting = ", ".join(map(str, problem.waiting_customers)) or "-"
        console.print(
            "[red]"
            + _(
                "KEFU_AGENT_PROFILE_UNKNOWN: route {route} (account {account}) names agent profile {profile}, which is"
                " not configured: it answers nobody; customers waiting: {waiting}"
            ).format(route=problem.route, account=problem.account, profile=problem.profile, waiting=waiting)
            + "[/red]",
            soft_wrap=True,
            highlight=False,
        )


@agents.command()
def show(name: str, as_json: AsJson = False) -> None:
    """One agent profile: provider, model, knowledge, tools, memory, its routes and its system prompt."""
    from runtime.agent.profiles import agent_profile, routes_by_profile

    settings = current_settings()
    with operator_errors():
        profile = agent_profile(settings.agent, name)
        routes = routes_by_profile(_routes()).get(profile.name, [])
    row = _row(profile, routes)
    if as_json:
        print(json.dumps({**row.model_dump(), "system_prompt": profile.agent.persona}, ensure_ascii=False))
        return
    fields = [(N_("name"), row.name), (N_("provider"), row.provider), (N_("model"), row.model)]
    if row.endpoint is not None:
        fields += [(N_("endpoint"), row.endpoint), (N_("api_key"), row.api_key or "-")]
    else:
        fields.append((N_("knowledge_file"), row.knowledge_file))
    fields += [(N_("tools"), row.tools), (N_("memory"), row.memory), (N_("system prompt"), row.persona)]
    fields += [(N_("routes"), ", ".join(f"{r.id} ({_target(r)})" for r in routes) or "-")]
    print_table(_("agent profile {name}").format(name=row.name), [N_("field"), N_("value")],
                [[_(field), value] for field, value in fields], flexible="value")  # fmt: skip
    console.print(_("system prompt:"), style="bold")
    console.print(profile.agent.persona, markup=False, highlight=False, soft_wrap=True)


def _target(route: Route) -> str:
    """Which conversations a route covers: `account, direct all` or `account, group <id>`."""
    target = route.conversation_id if route.target == "specific" else "all"
    return f"{route.account_id}, {route.conversation_type} {target}"
