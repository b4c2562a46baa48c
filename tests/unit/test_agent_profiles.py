"""Agent profiles (issue 42 item 1): named agents in the settings, each bad field named at startup;
a route naming a profile that is not configured is refused when added or changed, and one whose
profile left the settings later keeps its customers' input waiting with an alert, never another
agent's answer; a turn runs as its route's profile (prompt, knowledge, tools, memory) and the
session header records it; a change of profile, or of a profile's model, begins a new session."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from config import Settings, load_settings
from config.settings import AGENT_TOOLS, SettingsError
from runtime import pipeline
from runtime.admission.batches import evaluate
from runtime.admission.routes import RouteChanges, RouteSpec, create_route, list_routes, update_route
from runtime.agent.profiles import agent_profile, all_profiles, customer_profile
from runtime.agent.rotation import rotate_by_operator
from runtime.agent.session_log import RequestHeader, SessionLog
from runtime.agent.sessions import customer_sessions, session_path
from runtime.agent.tools import TOOLS
from runtime.errors import KefuError
from runtime.inbound.inbox import record_received
from runtime.inbound.ingest import ingest_page
from runtime.inbound.pages import ConversationGroup, InboundMessage, InboundPage, Sender, TextContent
from runtime.memory.tools import MEMORY_TOOLS
from runtime.operators.alerts import undelivered
from runtime.store import DeliveryStore
from runtime.store.states import RotationReason
from tests.local_services import Local
from worker.cli import cli

PRESALE_FAQ = """
greeting = "您好，这里是售前咨询。"
handoff_reason = "售前问题需要人工"
[[faq]]
keywords = ["发货"]
answer = "售前：下单后当天发货。"
"""
AFTERSALE_FAQ = """
greeting = "您好，这里是售后服务。"
handoff_reason = "售后问题需要人工"
[[faq]]
keywords = ["发货"]
answer = "售后：补发的商品三天内发货。"
"""


@pytest.fixture
def faqs(tmp_path: Path) -> tuple[Path, Path]:
    presale, aftersale = tmp_path / "presale.toml", tmp_path / "aftersale.toml"
    presale.write_text(PRESALE_FAQ, "utf-8")
    aftersale.write_text(AFTERSALE_FAQ, "utf-8")
    return presale, aftersale


def problems(**agent: object) -> str:
    with pytest.raises(SettingsError) as raised:
        load_settings(agent=agent)
    return str(raised.value)


# --- settings -------------------------------------------------------------------------------


def test_profiles_load_from_kefu_toml_and_the_environment(tmp_path, faqs, monkeypatch):
    presale, _ = faqs
    (tmp_path / "prompt.txt").write_text("你是售后客服，先安抚顾客。\n", "utf-8")
    (tmp_path / "kefu.toml").write_text(
        f"""
[agent.profiles.presale]
persona = "你是售前客服。"
knowledge_file = "{presale}"
tools = ["im_send_message", "im_handoff"]
memory = false
""",
        "utf-8",
    )
    monkeypatch.setenv("KEFU_AGENT__PROFILES__AFTERSALE__PERSONA_FILE", str(tmp_path / "prompt.txt"))
    monkeypatch.setenv("KEFU_AGENT__PROFILES__AFTERSALE__PROVIDER", "openai")
    monkeypatch.setenv("KEFU_AGENT__PROFILES__AFTERSALE__MODEL", "qwen-plus")
    monkeypatch.setenv("KEFU_AGENT__PROFILES__AFTERSALE__TOOLS", "im_send_message,memory_recall")
    monkeypatch.setenv("KEFU_AGENT__OPENAI__BASE_URL", "https://llm.example.com/v1")
    monkeypatch.setenv("KEFU_AGENT__OPENAI__API_KEY", "sk-top-level")
    settings = load_settings(data_dir=tmp_path / "var")
    assert settings.agent.profile_names == {"default", "presale", "aftersale"}
    presale_profile = agent_profile(settings.agent, "presale")
    assert presale_profile.agent.persona == "你是售前客服。" and presale_profile.agent.knowledge_file == presale
    assert (presale_profile.model_name, presale_profile.tools, presale_profile.memory) == (
        "rules",
        ("im_send_message", "im_handoff"),
        False,
    )
    aftersale = agent_profile(settings.agent, "aftersale")
    assert aftersale.agent.persona == "你是售后客服，先安抚顾客。"
    assert aftersale.model_name == "openai:qwen-plus"  # the endpoint and key are the top-level ones
    assert aftersale.agent.openai.base_url == "https://llm.example.com/v1"
    assert aftersale.agent.openai.api_key.get_secret_value() == "sk-top-level"  # type: ignore[union-attr]
    assert settings.agent.uses_openai and not presale_profile.agent.profiles
    # The top-level settings stay the default profile, untouched.
    default = agent_profile(settings.agent, "default")
    assert default.agent is settings.agent and default.model_name == "rules" and default.tools is None
    assert [p.name for p in all_profiles(settings.agent)] == ["default", "aftersale", "presale"]


@pytest.mark.parametrize(
    ("profile", "variable", "problem"),
    [
        ({"tools": ["im_send_message", "web_search"]}, "KEFU_AGENT__PROFILES__P__TOOLS", "unknown tool(s) web_search"),
        ({"tools": ["im_handoff"]}, "KEFU_AGENT__PROFILES__P__TOOLS", "must include im_send_message"),
        ({"knowledge_file": "missing.toml"}, "KEFU_AGENT__PROFILES__P__KNOWLEDGE_FILE", "is not a file"),
        ({"persona_file": "missing.txt"}, "KEFU_AGENT__PROFILES__P__PERSONA_FILE", "is not a file"),
        ({"persona": ""}, "KEFU_AGENT__PROFILES__P__PERSONA", "at least 1 character"),
        ({"provider": "claude"}, "KEFU_AGENT__PROFILES__P__PROVIDER", "'rules' or 'openai'"),
        ({"memroy": False}, "KEFU_AGENT__PROFILES__P__MEMROY", "not a kefu setting"),
        ({"model": "gpt-4o"}, "KEFU_AGENT__PROFILES__P__MODEL", "only for the openai provider"),
        ({"provider": "openai", "model": "m"}, "KEFU_AGENT__PROFILES__P__BASE_URL", "needs"),
    ],
)
def test_a_bad_profile_field_stops_startup_naming_it(profile, variable, problem):
    message = problems(profiles={"p": profile})
    assert "KEFU_CONFIG_INVALID" in message
    line = next(line for line in message.splitlines() if variable in line)
    assert problem in line


def test_profile_names_are_checked_and_default_is_the_top_level_agent(tmp_path):
    (tmp_path / "prompt.txt").write_text("x", "utf-8")
    assert "'default' is the top-level agent settings' profile" in problems(profiles={"default": {}})
    assert "profile name 'pre sale' must be 1-32 characters" in problems(profiles={"pre sale": {}})
    both = problems(profiles={"p": {"persona": "a", "persona_file": str(tmp_path / "prompt.txt")}})
    assert "KEFU_AGENT__PROFILES__P" in both and "set persona or persona_file, not both" in both


def test_an_api_key_is_never_echoed_in_a_settings_error():
    message = problems(profiles={"p": {"provider": "rules", "api_key": "sk-very-secret"}})
    assert "KEFU_AGENT__PROFILES__P__API_KEY" in message and "sk-very-secret" not in message


def test_the_settings_know_every_tool_the_agent_has():
    assert set(AGENT_TOOLS) == set(TOOLS) | set(MEMORY_TOOLS)


# --- routes ---------------------------------------------------------------------------------


def with_profiles(settings: Settings, faqs: tuple[Path, Path], **extra: object) -> Settings:
    presale, aftersale = faqs
    profiles = {
        "presale": {"knowledge_file": presale, "persona": "你是售前客服。", **extra},
        "aftersale": {"knowledge_file": aftersale, "tools": ["im_send_message"], "memory": False},
    }
    return load_settings(data_dir=settings.data_dir, agent={"profiles": profiles})


def route(route_id: str, conversation: str | None = None, profile: str | None = None) -> RouteSpec:
    return RouteSpec(
        id=route_id,
        account_id="shop",
        conversation_type="direct",
        target="specific" if conversation else "all",
        conversation_id=conversation,
        agent_preset=profile,
    )


def test_a_route_naming_an_unknown_profile_is_refused_and_nothing_is_written(store, settings, shop, faqs):
    known = with_profiles(settings, faqs).agent.profile_names
    with pytest.raises(KefuError) as raised:
        create_route(store, route("r", "conv-b1", "presales"), "op-r", profiles=known)
    assert raised.value.code == "KEFU_AGENT_PROFILE_UNKNOWN" and "'presales'" in str(raised.value)
    assert "aftersale, default, presale" in raised.value.message
    assert [r.id for r in list_routes(store)] == ["all-direct"]
    create_route(store, route("r", "conv-b1", "presale"), "op-r2", profiles=known)
    create_route(store, route("d", "conv-b2", "default"), "op-d", profiles=())  # the default is always known
    # Changing to an unknown profile is refused too; changing to a known one bumps the generation.
    with pytest.raises(KefuError, match="KEFU_AGENT_PROFILE_UNKNOWN"):
        update_route(store, "r", 1, RouteChanges(agent_preset="nope"), "op-u1", profiles=known)
    changed = update_route(store, "r", 1, RouteChanges(agent_preset="aftersale"), "op-u2", profiles=known)
    assert (changed.agent_preset, changed.generation) == ("aftersale", 2)
    # A route whose profile left the settings can still be disabled (its profile is not changed).
    disabled = update_route(store, "r", 2, RouteChanges(enabled=False), "op-u3", profiles=())
    assert not disabled.enabled and disabled.agent_preset == "aftersale"


def test_the_cli_refuses_an_unknown_profile_with_its_code_and_exit_2(kefu, store, settings, shop, faqs, monkeypatch):
    from worker.celery_app import app

    monkeypatch.setattr(app, "kefu_settings", with_profiles(settings, faqs))
    args = ["routes", "add", "vip", "--account", "shop", "--type", "direct", "--conversation", "conv-b1"]
    refused = kefu.invoke(cli, [*args, "--profile", "nope"])
    assert refused.exit_code == 2 and "KEFU_AGENT_PROFILE_UNKNOWN" in refused.output
    assert "Traceback" not in refused.output and [r.id for r in list_routes(store)] == ["all-direct"]
    added = kefu.invoke(cli, [*args, "--profile", "presale"])
    assert added.exit_code == 0, added.output
    assert kefu.invoke(cli, ["routes", "set-profile", "all-direct", "nope"]).exit_code == 2
    moved = kefu.invoke(cli, ["routes", "set-profile", "all-direct", "aftersale"])
    assert moved.exit_code == 0 and "aftersale" in moved.output
    assert {r.id: r.agent_preset for r in list_routes(store)} == {"all-direct": "aftersale", "vip": "presale"}
    assert kefu.invoke(cli, ["routes", "set-profile", "all-direct", "default"]).exit_code == 0
    assert {r.id: r.agent_preset for r in list_routes(store)}["all-direct"] is None


def test_kefu_agents_list_and_show_name_the_routes_and_never_a_key(kefu, store, settings, shop, faqs, monkeypatch):
    from worker.celery_app import app

    configured = with_profiles(settings, faqs)
    endpoint = {"provider": "openai", "model": "qwen-plus", "base_url": "https://user:pw@llm.example.com/v1",
                "api_key": "sk-never-shown"}  # fmt: skip
    agent = configured.agent.model_dump()
    agent["profiles"]["aftersale"] = {**agent["profiles"]["aftersale"], **endpoint}
    configured = load_settings(data_dir=settings.data_dir, agent=agent)
    monkeypatch.setattr(app, "kefu_settings", configured)
    create_route(store, route("vip", "conv-b1", "presale"), "op-vip", profiles=configured.agent.profile_names)
    listed = kefu.invoke(cli, ["agents", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {row["name"]: row for row in json.loads(listed.output)["profiles"]}
    assert list(rows) == ["default", "aftersale", "presale"]
    assert {name: row["routes"] for name, row in rows.items()} == {
        "default": "all-direct",
        "presale": "vip",
        "aftersale": "-",
    }
    assert rows["presale"]["tools"] == ", ".join(AGENT_TOOLS)  # unset: every tool
    assert rows["aftersale"]["tools"] == "im_send_message" and rows["aftersale"]["memory"] == "off"
    assert rows["aftersale"]["model"] == "openai:qwen-plus" and rows["aftersale"]["api_key"] == "set"
    shown = kefu.invoke(cli, ["agents", "show", "aftersale"])
    table = kefu.invoke(cli, ["agents", "list"])
    for output in (listed.output, shown.output, table.output):
        assert "sk-never-shown" not in output and "user:pw" not in output
    assert "https://****@llm.example.com/v1" in shown.output
    presale = kefu.invoke(cli, ["agents", "show", "presale"])
    assert "你是售前客服。" in presale.output and "vip (shop, direct conv-b1)" in presale.output
    unknown = kefu.invoke(cli, ["agents", "show", "nope"])
    assert unknown.exit_code == 2 and "KEFU_AGENT_PROFILE_UNKNOWN" in unknown.output


# --- admission and turns --------------------------------------------------------------------


def page(n: int, buyer: str, text: str = "什么时候发货？") -> InboundPage:
    message = InboundMessage(
        platform_message_id=f"m{n}",
        sender=Sender(id=buyer, display_name=buyer, role="buyer"),
        content=TextContent(text=text),
        occurred_at=datetime.now(UTC),
        direct_peer_id=buyer,
    )
    group = ConversationGroup(conversation_id=f"conv-{buyer}", conversation_type="direct", messages=[message])
    return InboundPage(account_id="shop", stream_id="mock", cursor=f"c{n}", page_op_id=f"p{n}", groups=[group])


def say(services: Local, n: int, buyer: str, text: str = "什么时候发货？") -> int:
    """A page through the pipeline's ingest (admission with it) and the turn it made due; the customer."""
    received = page(n, buyer, text)
    record_received(services.store, received)
    step = pipeline.ingest(services, received.model_dump(mode="json"))
    for work in step.follow_ups:
        if isinstance(work, pipeline.RunTurn):
            pipeline.turn(services, work.customer_id, lambda _: None)
    with services.store.read() as conn:
        return int(conn.execute("SELECT id FROM customer WHERE conversation_id = ?", (f"conv-{buyer}",)).scalar_one())


def replies(store: DeliveryStore, customer: int) -> list[str]:
    with store.read() as conn:
        rows = conn.execute("SELECT body FROM outbox_request WHERE customer_id = ? ORDER BY created_at", (customer,))
        return [str(text) for (text,) in rows]


def sessions(store: DeliveryStore, customer: int) -> list:
    with store.read() as conn:
        return customer_sessions(conn, customer)


def test_each_route_answers_as_its_profile_and_the_header_records_it(store, settings, shop, faqs):
    services = Local(with_profiles(settings, faqs), store)
    known = services.settings.agent.profile_names
    create_route(store, route("vip", "conv-b1", "presale"), "op-vip", profiles=known)
    update_route(store, "all-direct", 1, RouteChanges(agent_preset="aftersale"), "op-all-u", profiles=known)
    b1, b2 = say(services, 1, "b1"), say(services, 2, "b2")
    assert replies(store, b1) == ["售前：下单后当天发货。"] and replies(store, b2) == ["售后：补发的商品三天内发货。"]
    [first] = sessions(store, b1)
    [second] = sessions(store, b2)
    assert (first.profile, first.model, second.profile) == ("presale", "rules", "aftersale")
    presale_log = SessionLog(session_path(settings.sessions_dir, first.id))
    presale_log.load()
    assert presale_log.events[0].text.startswith("你是售前客服。")  # type: ignore[union-attr]
    aftersale_log = SessionLog(session_path(settings.sessions_dir, second.id))
    aftersale_log.load()
    [header] = [e for e in aftersale_log.events if isinstance(e, RequestHeader)]
    assert header.tools == ["im_send_message"]  # its allowed tools only, memory off
    # A buyer of a profile without handoff whose question has no answer: no tool is called.
    say(services, 3, "b2", "可以寄到国外吗")
    assert replies(store, b2) == ["售后：补发的商品三天内发货。"]
    with store.read() as conn:
        paused = conn.execute("SELECT handling_paused FROM customer WHERE id = ?", (b2,)).scalar_one()
    assert not paused


def test_a_profile_gone_from_the_settings_keeps_input_waiting_with_one_alert(store, settings, shop, faqs, caplog):
    configured = Local(with_profiles(settings, faqs), store)
    create_route(store, route("vip", "conv-b1", "presale"), "op-vip", profiles=configured.settings.agent.profile_names)
    gone = Local(settings, store)  # a worker restarted without the profile
    b1 = say(gone, 1, "b1")
    say(gone, 2, "b1", "在吗")
    assert replies(store, b1) == []  # never another agent's answer
    with store.read() as conn:
        states = conn.execute("SELECT state FROM inbound_message WHERE customer_id = ?", (b1,)).scalars().all()
    assert states == ["pending", "pending"]
    alerts = [a for a in undelivered(store) if a.kind == "profile-unknown"]
    assert [(a.customer_id, a.code) for a in alerts] == [(b1, "KEFU_AGENT_PROFILE_UNKNOWN")]  # once, not per message
    with caplog.at_level("WARNING", logger="runtime.pipeline"):
        assert pipeline.admit(gone, b1).outcome == "profile-unknown"  # the reconciler's pass says it again
    assert "KEFU_AGENT_PROFILE_UNKNOWN" in caplog.text and "'presale'" in caplog.text
    assert len([a for a in undelivered(store) if a.kind == "profile-unknown"]) == 1
    # The profile is back: what waited is admitted and answered as the profile.
    step = pipeline.admit(configured, b1)
    assert step.outcome == "admitted"
    pipeline.turn(configured, b1, lambda _: None)
    assert replies(store, b1) == ["售前：下单后当天发货。"]


def test_a_batch_whose_profile_left_before_its_turn_stays_open(store, settings, shop, faqs):
    configured = Local(with_profiles(settings, faqs), store)
    create_route(store, route("vip", "conv-b1", "presale"), "op-vip", profiles=configured.settings.agent.profile_names)
    received = page(1, "b1")
    [b1] = ingest_page(store, received).customer_ids
    assert evaluate(store, b1, 1000, configured.settings.agent.profile_names).reason == "admitted"
    gone = Local(settings, store)
    assert pipeline.turn(gone, b1, lambda _: None).outcome == "profile-unknown"
    with store.read() as conn:
        assert conn.execute("SELECT state FROM admission_batch WHERE customer_id = ?", (b1,)).scalar_one() == "claimed"
    assert [a.customer_id for a in undelivered(store) if a.kind == "profile-unknown"] == [b1]
    pipeline.turn(configured, b1, lambda _: None)
    assert replies(store, b1) == ["售前：下单后当天发货。"]


# --- rotation -------------------------------------------------------------------------------


def test_a_route_moved_to_another_profile_rotates_the_session(store, settings, shop, faqs):
    services = Local(with_profiles(settings, faqs), store)
    known = services.settings.agent.profile_names
    b1 = say(services, 1, "b1")  # the default profile (the all route names none)
    [before] = sessions(store, b1)
    assert before.profile == "default"
    update_route(store, "all-direct", 1, RouteChanges(agent_preset="presale"), "op-all-u", profiles=known)
    say(services, 2, "b1")
    first, second = sessions(store, b1)
    assert (second.reason, second.parent, second.profile) == (RotationReason.PROFILE_CHANGE, first.id, "presale")
    log = SessionLog(session_path(settings.sessions_dir, second.id))
    log.load()
    assert "店铺为这个会话换了客服设定" in log.events[0].text  # type: ignore[union-attr]
    assert replies(store, b1)[-1] == "售前：下单后当天发货。"
    say(services, 3, "b1")  # the same profile: the session goes on
    assert len(sessions(store, b1)) == 2


def test_a_change_of_a_profiles_model_rotates_as_a_model_change_and_the_switch_turns_it_off(
    store, settings, shop, faqs
):
    endpoint = {"base_url": "https://llm.example.com/v1", "api_key": "sk-x"}
    rules = Local(with_profiles(settings, faqs), store)
    create_route(store, route("vip", "conv-b1", "presale"), "op-vip", profiles=rules.settings.agent.profile_names)
    b1 = say(rules, 1, "b1")
    # The presale profile now runs a model (the provider here stays the rules agent of its file).
    openai = load_settings(
        data_dir=settings.data_dir,
        agent={"profiles": {"presale": {"knowledge_file": faqs[0], "provider": "openai", "model": "m2", **endpoint}}},
    )
    say(Local(openai, store), 2, "b1")
    first, second = sessions(store, b1)
    assert (first.model, second.model, second.reason) == ("rules", "openai:m2", RotationReason.MODEL_CHANGE)
    # With KEFU_AGENT__ROTATE_ON_MODEL_CHANGE=false neither a model nor a profile change rotates.
    kept = openai.agent.model_copy(update={"rotate_on_model_change": False})
    update_route(store, "vip", 1, RouteChanges(agent_preset=None), "op-vip2", profiles=())
    say(Local(openai.model_copy(update={"agent": kept}), store), 3, "b1")
    assert len(sessions(store, b1)) == 2


def test_an_operator_rotation_begins_the_new_session_under_the_customers_profile(store, settings, shop, faqs):
    services = Local(with_profiles(settings, faqs), store)
    create_route(store, route("vip", "conv-b1", "presale"), "op-vip", profiles=services.settings.agent.profile_names)
    b1 = say(services, 1, "b1")
    header = rotate_by_operator(store, b1, settings.sessions_dir, None, services.settings.agent)
    assert (header.profile, header.model, header.reason) == ("presale", "rules", RotationReason.OPERATOR)
    assert customer_profile(store, b1, services.settings.agent).name == "presale"
    say(services, 2, "b1")  # the next turn finds nothing to rotate for
    assert [s.id for s in sessions(store, b1)][-1] == header.id


# --- the worker ------------------------------------------------------------------------------


def test_a_worker_builds_every_profile_at_startup_and_a_bad_faq_names_its_variable(settings, faqs, tmp_path):
    from worker.celery_app import pool_defaults
    from worker.context import WorkerRuntime

    broken = tmp_path / "broken.toml"
    broken.write_text("greeting = ", "utf-8")  # not TOML
    bad = load_settings(data_dir=settings.data_dir, agent={"profiles": {"presale": {"knowledge_file": broken}}})
    with pytest.raises(KefuError) as raised:
        WorkerRuntime(bad).check()
    assert raised.value.code == "KEFU_KNOWLEDGE_INVALID"
    assert "KEFU_AGENT__PROFILES__PRESALE__KNOWLEDGE_FILE" in str(raised.value)
    good = WorkerRuntime(with_profiles(settings, faqs))
    presale, provider = good.agent_for("presale")
    assert presale.name == "presale" and good.agent_for("presale")[1] is provider  # built once
    assert good.agent_for(None)[1] is good.provider and good.local_agent
    assert pool_defaults(good.settings, []) == {}  # every profile answers from the process
    endpoint = {"provider": "openai", "model": "m", "base_url": "https://llm.example.com/v1", "api_key": "k"}
    mixed = load_settings(data_dir=settings.data_dir, agent={"profiles": {"aftersale": endpoint}})
    assert not WorkerRuntime(mixed).local_agent and pool_defaults(mixed, [])["worker_pool"] == "threads"


def test_the_console_ops_page_names_a_route_whose_profile_is_gone_and_its_customers(store, settings, shop, faqs):
    from starlette.testclient import TestClient

    from runtime.operators.accounts import Role, add_operator
    from worker.console import create_app
    from worker.context import WorkerRuntime

    configured = Local(with_profiles(settings, faqs), store)
    create_route(store, route("vip", "conv-b1", "presale"), "op-vip", profiles=configured.settings.agent.profile_names)
    b1 = say(Local(settings, store), 1, "b1")
    add_operator(store, "victor", Role.VIEWER, "viewer-pass-1")
    for runtime, shown in ((WorkerRuntime(settings), True), (WorkerRuntime(configured.settings), False)):
        with TestClient(create_app(runtime)) as client:
            token = client.get("/login").text.split('name="csrf" value="')[1].split('"')[0]
            client.post("/login", data={"csrf": token, "name": "victor", "password": "viewer-pass-1"})
            page = client.get("/ops").text
        assert ('id="lost-profiles"' in page) is shown
        if shown:
            listed = page.split('id="lost-profiles"')[1].split("</ul>")[0]
            assert "vip" in listed and "presale" in listed and f'href="/c/{b1}"' in listed
