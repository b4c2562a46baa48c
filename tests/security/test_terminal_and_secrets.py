"""What a hostile buyer or a careless setting can put in front of an operator: buyer text with
terminal control sequences and rich markup reaches the terminal inert, and `kefu config` and a
bad setting's error never show a credential (issue 38, items 7 and 9)."""

from __future__ import annotations

import pytest

from config import load_settings
from config.settings import SettingsError
from runtime.inbound.ingest import ingest_page
from worker.cli import cli

# A window retitle (OSC), a colour (CSI), a bell, a right-to-left override, a zero-width space.
HOSTILE = "\x1b]0;pwned\x07\x1b[31m红色\x1b[0m \u202eevil\u200b [/oops] [bold]x[/bold]"
RAW = ("\x1b", "\x07", "\u202e", "\u200b")


def test_buyer_text_reaches_the_terminal_without_its_control_sequences(kefu, store, shop, platform, transport):
    said = platform.buyer_says(shop, "b1", "张\x1b[2J三\u202e", HOSTILE)
    [customer] = ingest_page(store, transport.page_of(shop, [said])).customer_ids
    history = kefu.invoke(cli, ["history", str(customer)])
    listed = kefu.invoke(cli, ["customers"])
    for result in (history, listed):
        assert result.exit_code == 0, result.output
        assert not any(raw in result.output for raw in RAW)
    assert "\\u001b]0;pwned\\u0007" in history.output and "[/oops] [bold]x[/bold]" in history.output  # shown, inert


def test_a_buyer_line_that_looks_like_markup_is_said_as_it_is(kefu):
    new = kefu.invoke(cli, ["simulate", "new", "--manual"])
    assert new.exit_code == 0, new.output
    instance = new.output.split(":", 1)[0].strip()
    said = kefu.invoke(cli, ["simulate", "say", instance, "[/oops] \x1b]0;x\x07"])
    assert said.exit_code == 0, said.output
    assert "[/oops]" in said.output and "\x1b" not in said.output


def test_kefu_config_shows_where_urls_point_never_their_credentials(kefu, settings, monkeypatch):
    secrets = {"s3cret-pass", "tok-123"}
    masked = settings.model_copy(
        update={
            "broker_url": "redis://:s3cret-pass@redis-host:6379/0",
            "checkpoint": settings.checkpoint.model_copy(update={"http_url": "https://hooks.example/cp?token=tok-123"}),
        }
    )
    from worker.celery_app import app

    monkeypatch.setattr(app, "kefu_settings", masked, raising=False)
    shown = kefu.invoke(cli, ["config"])
    assert shown.exit_code == 0, shown.output
    assert not any(secret in shown.output for secret in secrets)
    assert "redis://****@redis-host:6379/0" in shown.output and "https://hooks.example/cp?****" in shown.output


@pytest.mark.parametrize("value", ["hooks.example/cp?token=tok-123", "ftp://user:tok-123@hooks.example/cp"])
def test_a_bad_url_setting_is_named_and_never_echoed(monkeypatch, value):
    monkeypatch.setenv("KEFU_CHECKPOINT__HTTP_URL", value)
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert "KEFU_CHECKPOINT__HTTP_URL" in str(raised.value) and "tok-123" not in str(raised.value)
