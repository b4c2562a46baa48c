"""The `kefu` command speaks the operator's language (issue 41, item 5): Simplified Chinese by
default, English with KEFU_LANGUAGE=en. Every word it prints is an English msgid marked with
`_()` or `N_()` in worker/cli (and the demo's and a simulation's lines), every help text of its
command tree is one too, and the Chinese catalog has each with the same placeholders. A
`KEFU_…` error stays English with its code and exit status; JSON stays data."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir, extract_from_file
from babel.messages.pofile import read_po
from rich.cells import cell_len
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption
from typer.main import get_command

from config import Settings, load_settings
from runtime.customers.erasure import ErasureCounts
from runtime.memory.report import ScopeReport
from worker.cli import cli
from worker.cli.common import console, print_table
from worker.i18n import catalog_path

ROOT = Path(__file__).parents[2]
# Lines the CLI prints for them: the demo's, a simulation's, a transcript's (`kefu history`).
SPEAKERS = [ROOT / "worker" / "demo.py", ROOT / "worker" / "simulation.py", ROOT / "worker" / "transcript_words.py"]
PLACEHOLDER = re.compile(r"\{[^{}]*\}")


def marked() -> dict[str, str]:
    """Every msgid worker/cli marks with _() or N_(), and the demo's and a simulation's lines, with where."""
    found: dict[str, str] = {}
    for filename, lineno, message, _, _ in extract_from_dir(str(ROOT / "worker" / "cli"), [("*.py", "python")]):
        assert isinstance(message, str), f"worker/cli/{filename}:{lineno}: the CLI has no plural forms"
        found.setdefault(message, f"worker/cli/{filename}:{lineno}")
    for path in SPEAKERS:
        for lineno, message, _, _ in extract_from_file("python", path):
            found.setdefault(message, f"{path.relative_to(ROOT)}:{lineno}")
    return found


def help_texts(command: TyperCommand | TyperGroup, path: str = "kefu") -> dict[str, str]:
    """Every help text of the command tree (commands, their parameters, the help option), with where."""
    found: dict[str, str] = {}
    for text in (command.help, command.short_help):
        if text:
            found.setdefault(text, path)
    for parameter in [*command.params, command.get_help_option(typer.Context(command))]:
        if isinstance(parameter, TyperArgument | TyperOption) and parameter.help:
            found.setdefault(parameter.help, f"{path} {parameter.name}")
    if isinstance(command, TyperGroup):
        for name, sub in command.commands.items():
            if isinstance(sub, TyperCommand | TyperGroup):
                for text, where in help_texts(sub, f"{path} {name}").items():
                    found.setdefault(text, where)
    return found


def data_words() -> dict[str, str]:
    """Words the CLI makes from a model's fields, so no _() names them: an erasure's counts
    (`kefu customers erase`) and the columns of `kefu memory report`."""
    erased = {name.replace("_", " "): "ErasureCounts" for name in ErasureCounts.model_fields}
    return erased | dict.fromkeys(ScopeReport.model_fields, "ScopeReport")


def chinese() -> Catalog:
    with catalog_path("zh_CN", "cli").open("rb") as po:
        return read_po(po, locale="zh_CN", domain="cli")


def test_every_word_the_cli_says_is_in_the_chinese_catalog_with_its_placeholders():
    wanted = marked() | help_texts(get_command(cli)) | data_words()
    catalog = chinese()
    gaps = []
    for msgid, where in wanted.items():
        message = catalog.get(msgid)
        if message is None or not message.string or message.fuzzy:
            gaps.append(f"{where}: {msgid!r} has no Chinese")
        elif sorted(PLACEHOLDER.findall(msgid)) != sorted(PLACEHOLDER.findall(str(message.string))):
            gaps.append(f"{where}: {msgid!r}: placeholders {PLACEHOLDER.findall(str(message.string))}")
    stale = [m.id for m in catalog if m.id and m.id not in wanted]
    assert not gaps, "\n".join(gaps)
    assert not stale, f"catalog entries nothing says any more: {stale}"
    header = catalog.mime_headers
    assert ("Language", "zh_CN") in header and ("Plural-Forms", "nplurals=1; plural=0;") in header


@pytest.fixture
def language() -> str | None:
    return None  # KEFU_LANGUAGE unset: the default


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, language: str | None) -> Settings:
    """The test's settings (as tests/conftest.py makes them) in `language`: the `kefu` fixture
    puts them where the commands read theirs."""
    if language is None:
        monkeypatch.delenv("KEFU_LANGUAGE")
    else:
        monkeypatch.setenv("KEFU_LANGUAGE", language)
    return load_settings(data_dir=tmp_path / "var")


def test_the_help_is_chinese_by_default(kefu, settings):
    assert settings.language == "zh_CN"
    top = kefu.invoke(cli, ["--help"])
    assert top.exit_code == 0
    assert "选项" in top.output and "命令" in top.output and "显示本帮助并退出。" in top.output
    assert "由客服接管： 暂停自动处理" in top.output  # `take-over`, breakable between clauses
    assert "Show this message" not in top.output and "Commands" not in top.output
    customers = kefu.invoke(cli, ["customers", "--help"])
    assert customers.exit_code == 0 and "每页客户数" in customers.output and "列出它们" in customers.output
    assert "customers per page" not in customers.output
    assert "显示本帮助并退出。" in kefu.invoke(cli, []).output  # no command: the help, translated too


def test_tables_and_lines_are_chinese_and_errors_keep_their_code(kefu, store):
    outbox = kefu.invoke(cli, ["outbox"])
    assert outbox.exit_code == 0
    assert "真实发件箱" in outbox.output and "请求 ID" in outbox.output and "错误码" in outbox.output
    listed = kefu.invoke(cli, ["customers", "--source", "simulation"])
    assert "模拟客户" in listed.output and "最新消息" in listed.output and "负责客服" in listed.output
    added = kefu.invoke(cli, ["canned", "add", "问候", "您好"])
    assert added.exit_code == 0 and "快捷回复 /问候 已添加" in added.output
    assert '"shortcut": "问候"' in kefu.invoke(cli, ["canned", "list", "--json"]).output  # JSON: data, as stored
    refused = kefu.invoke(cli, ["customers", "--source", "both"])
    assert refused.exit_code == 2 and "kefu: KEFU_INVALID_INPUT" in refused.output


@pytest.mark.parametrize("language", ["en"])
def test_kefu_language_en_says_the_msgids(kefu, store, language):
    top = kefu.invoke(cli, ["--help"])
    assert "Options" in top.output and "Show this message and exit." in top.output
    assert "An operator answers from now on:" in top.output  # `take-over`
    outbox = kefu.invoke(cli, ["outbox"])
    assert "real outbox" in outbox.output and "request_id" in outbox.output and "请求" not in outbox.output
    added = kefu.invoke(cli, ["canned", "add", "问候", "您好"])
    assert "canned reply /问候 added" in added.output
    refused = kefu.invoke(cli, ["customers", "--source", "both"])
    assert refused.exit_code == 2 and "kefu: KEFU_INVALID_INPUT" in refused.output


def test_a_table_too_wide_for_the_terminal_lines_up_its_chinese_field_names(kefu):
    width = console.width
    console.width = 24  # too narrow for the table: one block of `field  value` lines per row
    try:
        with console.capture() as captured:
            print_table("账号", ["id", "connection_intent", "listener_state"], [["shop", "connected", "failed"]])
    finally:
        console.width = width
    lines = captured.get().splitlines()
    assert lines[0] == "账号"
    values = [line.index(value) for line, value in zip(lines[1:], ["shop", "connected", "failed"], strict=True)]
    starts = [cell_len(line[:at]) for line, at in zip(lines[1:], values, strict=True)]
    assert lines[1].startswith("  ID ") and len(set(starts)) == 1, lines  # every value at the same cell


def command_paths(command: TyperCommand | TyperGroup, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [path]
    if isinstance(command, TyperGroup):
        for name, sub in command.commands.items():
            if isinstance(sub, TyperCommand | TyperGroup):
                paths += command_paths(sub, (*path, name))
    return paths


def test_no_chinese_help_is_cut_short_at_80_columns(kefu, settings):
    """Rich wraps a help table's cell at spaces only and cuts what does not fit with "…"
    (Textualize/rich#2494): Chinese help is broken between clauses (common.help_words), and a
    clause that still ends up cut at 80 columns wants rewording in cli.po."""
    shown_with_ellipsis = [m.string for m in chinese() if "…" in str(m.string)]  # "cntaobao…"
    allowed = [s[s.index("…") - 3 : s.index("…") + 1] for s in map(str, shown_with_ellipsis)]
    cut = []
    for path in command_paths(get_command(cli)):
        shown = kefu.invoke(cli, [*path, "--help"], env={"COLUMNS": "80"})
        assert shown.exit_code == 0, (path, shown.output)
        for line in shown.output.splitlines():
            for word in allowed:
                line = line.replace(word, "")
            if "…" in line:
                cut.append(f"kefu {' '.join(path)} --help: {line.strip()}")
    assert not cut, "\n".join(cut)
