"""The `kefu` command's words in the operator's language (KEFU_LANGUAGE, worker.i18n): what it
prints is an English msgid marked `_()` (or `N_()`, translated later), its help texts are the
English of the code, and both are shown from the "cli" catalog, Simplified Chinese by default.
`KEFU_…` codes and error messages, JSON, logs and values from the store are never translated."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Any

import typer
from typer._click import Context
from typer._click.exceptions import NoArgsIsHelpError, UsageError  # typer vendors click: its errors are these
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from config import Settings

if TYPE_CHECKING:
    from worker.i18n import Language


def language() -> Language:
    """The settings' language: the worker's settings once a command has loaded them (or a test
    has set them), else the configuration read on its own, so that `kefu --help` builds no
    Celery app to know which words to show."""
    if "worker.celery_app" in sys.modules:
        from worker.cli.common import current_settings

        return current_settings().language
    return _configured_language()


@cache
def _configured_language() -> Language:
    from config import SettingsError, load_settings

    try:
        return load_settings().language
    except (SettingsError, ValueError):  # a bad value, a kefu.toml that does not parse: the command says so
        default: Language = Settings.model_fields["language"].default
        return default


def _(message: str) -> str:
    """`message` (English: the msgid) in the operator's language, from worker/locale's "cli"
    catalog. Placeholders are filled after translation: `_("customer {id}: paused").format(id=12)`,
    so a translation may move them."""
    from worker.i18n import translations

    return translations(language(), "cli").gettext(message)


def N_(message: str) -> str:  # gettext_noop, by its usual name
    """Marks `message` for the catalog without translating it here: a table's column is its
    field name until `print_table` shows it, a hint's noun until `hint_simulation` does."""
    return message


# Where a line of help may break: rich wraps a help table's cell at spaces only and cuts a
# longer run with "…", so Chinese, which has no spaces, gets one between its clauses: after
# a comma, colon or stop, around a longer parenthesis.
_CLAUSE_BREAK = re.compile(
    r"(?<=[，、；。])(?=[^\s，、；：。）])|(?<=：)(?=[\u4e00-\u9fff（])|(?<=\S)(?=（[^）]{6})|(?<=）)(?=[\u4e00-\u9fff])"
)


def help_words(message: str) -> str:
    """A help text (its msgid) as the help shows it: translated, breakable between clauses."""
    return _CLAUSE_BREAK.sub(" ", _(message))


def translate_help(command: TyperCommand | TyperGroup) -> None:
    """The help of `command` and of every command under it (their text, their parameters',
    the help option's and the panels' titles) in the operator's language, in place. The help
    strings stay plain English in the code; they are the catalog's msgids."""
    panels = {"argument": _("Arguments"), "option": _("Options"), "command": _("Commands")}
    if command.help:
        command.help = help_words(command.help)
    if command.short_help:
        command.short_help = help_words(command.short_help)
    command.rich_help_panel = command.rich_help_panel or panels["command"]
    parameters: list[Any] = [*command.params, command.get_help_option(typer.Context(command))]
    for parameter in parameters:
        if isinstance(parameter, TyperArgument | TyperOption):
            if parameter.help:
                parameter.help = help_words(parameter.help)
            parameter.rich_help_panel = parameter.rich_help_panel or panels[parameter.param_type_name]
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            if isinstance(sub, TyperCommand | TyperGroup):
                translate_help(sub)


class TranslatedGroup(TyperGroup):
    """The `kefu` command: its help in the operator's language before it parses a word (so
    `kefu --help`, a usage error's hint and every subcommand's help are translated), then the
    same run as Typer's own group (exit codes, errors)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        translate_help(self)
        return super().main(*args, **kwargs)

    def make_context(self, *args: Any, **kwargs: Any) -> Context:
        with _coded_usage_errors():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Context) -> Any:
        with _coded_usage_errors():  # a subcommand's own options are parsed in here
            return super().invoke(ctx)


class CodedUsageError(UsageError):
    """A usage error (an unknown option, a value not among an option's choices, a missing
    argument) as every other bad input is shown: with its KEFU_ code, exit 2."""

    def __init__(self, error: UsageError) -> None:
        super().__init__(error.format_message(), error.ctx)

    def format_message(self) -> str:
        return self.message if "KEFU_" in self.message else f"KEFU_INVALID_INPUT: {self.message}"


@contextmanager
def _coded_usage_errors() -> Iterator[None]:
    try:
        yield
    except NoArgsIsHelpError:  # `kefu outbox` alone: its help, not an error
        raise
    except UsageError as error:
        if isinstance(error, CodedUsageError):
            raise
        raise CodedUsageError(error) from None
