"""Settings: sources and their precedence, bounds named by variable, secrets never echoed."""

from __future__ import annotations

import pytest

from config import SettingsError, load_settings
from config.settings import setting_variables


def test_sources_env_over_dotenv_over_toml(tmp_path, monkeypatch):
    (tmp_path / "kefu.toml").write_text(
        'shard = "from-toml"\ntimezone = "Europe/Berlin"\n[admission]\nbatch_size = 7\n'
    )
    (tmp_path / ".env").write_text("KEFU_SHARD=from-dotenv\nKEFU_ADMISSION__BATCH_SIZE=8\n")
    monkeypatch.setenv("KEFU_ADMISSION__BATCH_SIZE", "9")
    settings = load_settings()
    assert (settings.shard, settings.timezone, settings.admission.batch_size) == ("from-dotenv", "Europe/Berlin", 9)
    assert settings.data_dir == (tmp_path / "var").resolve()


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        (
            "KEFU_ADMISSION__BATCH_SIZE",
            "1001",
            "Input should be less than or equal to 1000",
        ),
        (
            "KEFU_DELIVERY__JOURNAL_MODE",
            "MEMORY",
            "Input should be 'WAL' or 'DELETE'",
        ),
        (
            "KEFU_DELIVERY__CACHE_SIZE_KIB",
            "0",
            "Input should be greater than or equal to 1",
        ),
        ("KEFU_SHARD", "Bad Shard", "must be 1-32 characters"),
        ("KEFU_BROKER_URL", "kafka://x", "must be 'embedded' or a redis://"),
        ("KEFU_MEMORY__TRIGGER_PERCENT", "99", "Input should be less than or equal to 95"),
        ("KEFU_MEMORY__RECALL__FIRST_GEN_MAX", "0", "Input should be greater than or equal to 1"),
    ],
)
def test_a_bad_value_names_the_variable_and_its_bound(monkeypatch, variable, value, expected):
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert f"{variable} (got '{value}'): {expected}" in str(raised.value)


def test_errors_never_echo_a_secret(monkeypatch):
    monkeypatch.setenv("KEFU_AGENT__OPENAI__API_KEY", "sk-live-do-not-print")
    monkeypatch.setenv("KEFU_AGENT__OPENAI__TIMEOUT_S", "0")
    monkeypatch.setenv("KEFU_AGENT__OPENAI__BOGUS", "x")
    with pytest.raises(SettingsError) as raised:
        load_settings()
    message = str(raised.value)
    assert "KEFU_AGENT__OPENAI__TIMEOUT_S (got '0')" in message
    assert "KEFU_AGENT__OPENAI__BOGUS: not a kefu setting" in message
    assert "sk-live-do-not-print" not in message
    monkeypatch.delenv("KEFU_AGENT__OPENAI__TIMEOUT_S")
    monkeypatch.delenv("KEFU_AGENT__OPENAI__BOGUS")
    settings = load_settings()
    assert settings.agent.openai.api_key.get_secret_value() == "sk-live-do-not-print"
    assert "sk-live-do-not-print" not in repr(settings) and "sk-live" not in settings.model_dump_json()


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        (
            "KEFU_MEMORY__RELEASE_TARGET_PERCENT",
            "70",
            "KEFU_MEMORY__RELEASE_TARGET_PERCENT < KEFU_MEMORY__TRIGGER_PERCENT",
        ),
        ("KEFU_MEMORY__EMERGENCY_PERCENT", "55", "<= KEFU_MEMORY__EMERGENCY_PERCENT"),
        (
            "KEFU_MEMORY__RECALL__ROTATION_SLOTS",
            "10",
            "ROTATION_SLOTS must be less than KEFU_MEMORY__RECALL__FIRST_GEN_MAX",
        ),
    ],
)
def test_memory_lines_must_be_ordered(monkeypatch, variable, value, expected):
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match="KEFU_MEMORY") as raised:
        load_settings()
    assert expected in str(raised.value)


@pytest.mark.parametrize(
    ("variable", "expected"),
    [
        ("KEFU_BROKER_URI", "KEFU_BROKER_URI: not a kefu setting (did you mean KEFU_BROKER_URL?)"),
        ("KEFU_AGENT_PROVIDER", "KEFU_AGENT_PROVIDER: not a kefu setting (did you mean KEFU_AGENT__PROVIDER?)"),
        ("KEFU_SHARD__NAME", "KEFU_SHARD__NAME: not a kefu setting"),  # a scalar has no children
        ("KEFU_ZZZZZZ", "KEFU_ZZZZZZ: not a kefu setting\n"),  # nothing close: no guess
        (
            "KEFU_DELIVERY__BUSY_TIMEOUT",
            "KEFU_DELIVERY__BUSY_TIMEOUT: not a kefu setting (did you mean KEFU_DELIVERY__BUSY_TIMEOUT_MS?)",
        ),
    ],
)
def test_an_unknown_variable_stops_startup_naming_it(monkeypatch, variable, expected):
    monkeypatch.setenv(variable, "sk-maybe-a-secret")
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert expected in str(raised.value) + "\n"
    assert "sk-maybe-a-secret" not in str(raised.value)


def test_every_unknown_variable_is_named_with_the_bad_values(monkeypatch):
    monkeypatch.setenv("KEFU_BROKER_URI", "redis://x")
    monkeypatch.setenv("KEFU_TIMEZONE_", "UTC")
    monkeypatch.setenv("KEFU_ADMISSION__BATCH_SIZE", "0")
    with pytest.raises(SettingsError) as raised:
        load_settings()
    lines = str(raised.value).splitlines()[1:]
    assert [line.split(":")[0].split()[0] for line in lines] == [
        "KEFU_BROKER_URI",
        "KEFU_TIMEZONE_",
        "KEFU_ADMISSION__BATCH_SIZE",
    ]


def test_kefu_variables_that_are_not_settings_are_allowed(monkeypatch):
    for variable in ("KEFU_TEST_REDIS_URL", "KEFU_SETUP_SECRET"):
        monkeypatch.setenv(variable, "x")
    monkeypatch.setenv("KEFU_DELIVERY", '{"busy_timeout_ms": 50}')  # a whole section as JSON
    monkeypatch.setenv("kefu_shard", "lower-case")  # pydantic-settings reads names in any case
    settings = load_settings()
    assert (settings.delivery.busy_timeout_ms, settings.shard) == (50, "lower-case")


def test_an_unknown_key_in_dotenv_is_named_once_prefixed(tmp_path):
    (tmp_path / ".env").write_text("KEFU_BROKER_URI=redis://x\n")
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert "  KEFU_BROKER_URI: not a kefu setting (did you mean KEFU_BROKER_URL?)" in str(raised.value)
    assert "KEFU_KEFU_" not in str(raised.value)


def test_setting_variables_flatten_every_section():
    variables = setting_variables()
    assert {"KEFU_BROKER_URL", "KEFU_BROKER_VISIBILITY_TIMEOUT_S", "KEFU_AGENT__OPENAI__MODEL"} <= set(variables)
    assert "KEFU_AGENT" not in variables and "KEFU_MEMORY__RECALL__MAX_BLOCKS" in variables


OPENAI = {"KEFU_AGENT__PROVIDER": "openai"}
REDIS = {"KEFU_BROKER_URL": "redis://127.0.0.1:6379/0"}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"KEFU_OUTBOX__ATTEMPT_LEASE_S": "30"},
            "KEFU_OUTBOX__ATTEMPT_LEASE_S (30 s) must be longer than one platform send:"
            " KEFU_DINGTALK__TIMEOUT_S (10 s) × 3 calls (token, media upload, send) = 30 s",
        ),
        (
            {"KEFU_OUTBOX__ATTEMPT_LEASE_S": "40", "KEFU_WANGWANG__TIMEOUT_S": "40"},
            "KEFU_OUTBOX__ATTEMPT_LEASE_S (40 s) must be longer than one platform send:"
            " KEFU_WANGWANG__TIMEOUT_S (40 s) = 40 s",
        ),
        (
            {**REDIS, "KEFU_BROKER_VISIBILITY_TIMEOUT_S": "600", "KEFU_AGENT__TURN_LEASE_S": "600"},
            "KEFU_BROKER_VISIBILITY_TIMEOUT_S (600 s) must be longer than KEFU_AGENT__TURN_LEASE_S (600 s)",
        ),
        (
            {**REDIS, "KEFU_BROKER_VISIBILITY_TIMEOUT_S": "100", "KEFU_AGENT__TURN_LEASE_S": "100"},
            "(100 s) must be longer than KEFU_AGENT__TURN_LEASE_S (100 s) and KEFU_OUTBOX__ATTEMPT_LEASE_S (120 s)",
        ),
        (
            {"KEFU_LISTENER__LEASE_S": "10", "KEFU_LISTENER__SUPERVISE_INTERVAL_MS": "5000"},
            "KEFU_LISTENER__LEASE_S (10 s) must be longer than twice KEFU_LISTENER__SUPERVISE_INTERVAL_MS (5000 ms)",
        ),
    ],
)
def test_a_lease_shorter_than_its_work_stops_startup_naming_both(monkeypatch, env, expected):
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert expected in str(raised.value)


def test_every_broken_lease_rule_gets_its_own_line(monkeypatch):
    for variable, value in {
        **OPENAI,
        **REDIS,
        "KEFU_AGENT__TURN_LEASE_S": "100",
        "KEFU_OUTBOX__ATTEMPT_LEASE_S": "5",
        "KEFU_BROKER_VISIBILITY_TIMEOUT_S": "50",
    }.items():
        monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as raised:
        load_settings()
    lines = str(raised.value).splitlines()[1:]
    assert [line.split()[0] for line in lines] == [
        "KEFU_OUTBOX__ATTEMPT_LEASE_S",
        "KEFU_BROKER_VISIBILITY_TIMEOUT_S",
    ]


@pytest.mark.parametrize(
    "env",
    [
        {**OPENAI, **REDIS},  # the defaults hold under the strictest provider and broker
        {**OPENAI, "KEFU_AGENT__TURN_LEASE_S": "5"},  # heartbeated: shorter than a model call (247 s)
        {
            "KEFU_AGENT__TURN_LEASE_S": "2",
            "KEFU_BROKER_VISIBILITY_TIMEOUT_S": "1",
        },  # rules, embedded: no model call, no redelivery
        {
            **OPENAI,
            "KEFU_AGENT__TURN_LEASE_S": "2",
            "KEFU_AGENT__OPENAI__TIMEOUT_S": "0.5",
            "KEFU_AGENT__OPENAI__MAX_ATTEMPTS": "2",
            "KEFU_AGENT__OPENAI__RETRY_BACKOFF_S": "0.5",
        },  # 1.5 s
        {"KEFU_OUTBOX__ATTEMPT_LEASE_S": "2", "KEFU_DINGTALK__TIMEOUT_S": "0.5", "KEFU_WANGWANG__TIMEOUT_S": "1"},
    ],
)
def test_leases_that_outlive_their_work_are_accepted(monkeypatch, env):
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    load_settings()


def test_a_bad_url_is_echoed_without_its_password_or_query(monkeypatch):
    monkeypatch.setenv("KEFU_BROKER_URL", "kafka://user:hunter2@10.0.0.5:9092/0?token=abc")
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert "KEFU_BROKER_URL (got 'kafka://10.0.0.5:9092/0')" in str(raised.value)
    assert "hunter2" not in str(raised.value) and "abc" not in str(raised.value)


def test_a_network_models_worker_runs_a_thread_pool_unless_told_otherwise(tmp_path):
    from worker.celery_app import WORKER_THREADS_SPARE, pool_defaults

    rules = load_settings(data_dir=tmp_path)
    assert pool_defaults(rules, ["celery", "-A", "worker", "worker"]) == {}  # Celery's: a process per core
    network = load_settings(
        data_dir=tmp_path,
        agent={
            "provider": "openai",
            "openai": {"base_url": "http://x/v1", "api_key": "k", "model": "m", "max_concurrency": 40},
        },
    )
    picked = pool_defaults(network, ["celery", "-A", "worker", "worker", "-l", "info", "--pool-start-method", "spawn"])
    assert picked == {"worker_pool": "threads", "worker_concurrency": 40 + WORKER_THREADS_SPARE}
    for named in (["-P", "prefork"], ["-Pprefork"], ["--pool", "solo"], ["--pool=prefork"]):
        assert pool_defaults(network, ["celery", "-A", "worker", "worker", *named, "-c", "2"]) == {}, named


def test_a_data_dir_that_is_a_file_is_a_coded_setting_error_naming_it(tmp_path):
    a_file = tmp_path / "hostname"
    a_file.write_text("x")
    with pytest.raises(SettingsError) as raised:
        load_settings(data_dir=a_file)
    assert str(raised.value).startswith("KEFU_CONFIG_INVALID") and "KEFU_DATA_DIR" in str(raised.value)
    assert "is a file, not a folder" in str(raised.value)
    assert load_settings(data_dir=tmp_path / "not-yet").data_dir == tmp_path / "not-yet"  # made when first needed


def test_the_dingtalk_sdks_own_endpoint_variable_points_kefu_at_another_openapi(monkeypatch):
    """SPEC 7: DINGTALK_OPENAPI_ENDPOINT is how the official SDK is pointed at a local fake; kefu's
    own setting, when given, says more."""
    assert load_settings().dingtalk.openapi_url == "https://api.dingtalk.com"
    monkeypatch.setenv("DINGTALK_OPENAPI_ENDPOINT", "http://127.0.0.1:8765/")
    assert load_settings().dingtalk.openapi_url == "http://127.0.0.1:8765"
    monkeypatch.setenv("KEFU_DINGTALK__OPENAPI_URL", "http://127.0.0.1:9999")
    assert load_settings().dingtalk.openapi_url == "http://127.0.0.1:9999"
    monkeypatch.delenv("KEFU_DINGTALK__OPENAPI_URL")
    for bad in ("ftp://elsewhere", "https://"):
        monkeypatch.setenv("DINGTALK_OPENAPI_ENDPOINT", bad)
        with pytest.raises(SettingsError) as raised:
            load_settings()
        assert f"DINGTALK_OPENAPI_ENDPOINT (got '{bad}'): must be an http(s) URL" in str(raised.value)
        assert "OPENAPI_URL" not in str(raised.value)
