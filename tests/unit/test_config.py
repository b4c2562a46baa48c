"""Settings: sources and their precedence, bounds named by variable, secrets never echoed."""

from __future__ import annotations

import pytest

from config import SettingsError, load_settings


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
        ("KEFU_DELIVERY__BUSY_TIMEOUT", "5", "Extra inputs are not permitted"),
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
    assert "KEFU_AGENT__OPENAI__TIMEOUT_S (got '0')" in message and "KEFU_AGENT__OPENAI__BOGUS" in message
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
