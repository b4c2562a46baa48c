"""The documentation says what the code does: every setting of config/settings.py is listed in
docs/configuration.md (and nothing listed there is gone), and the README quotes no benchmark
figure, which would go stale as the code changes (`python -m bench.X` prints today's)."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from pydantic import BaseModel

from config.settings import OTHER_VARIABLES, Settings

ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION = ROOT / "docs" / "configuration.md"
README = ROOT / "README.md"
NAME = "<NAME>"  # how the doc writes the key of a dict-valued setting: KEFU_AGENT__PROFILES__<NAME>__…
VARIABLE = re.compile(r"KEFU_[A-Z0-9_]*\*?")


def _model(annotation: object) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _walk(model: type[BaseModel], prefix: str, scalars: list[str], patterns: dict[str, list[str]]) -> None:
    """Sections nest with `__`; a dict of sections (agent profiles) is a pattern whose fields are
    documented once, under `prefix<NAME>__`."""
    for name, field in model.model_fields.items():
        variable = prefix + name.upper()
        if section := _model(field.annotation):
            _walk(section, variable + "__", scalars, patterns)
        elif typing.get_origin(field.annotation) is dict and (entry := _model(typing.get_args(field.annotation)[1])):
            patterns[f"{variable}__{NAME}__"] = list(entry.model_fields)
        else:
            scalars.append(variable)


def _settings() -> tuple[list[str], dict[str, list[str]]]:
    scalars: list[str] = []
    patterns: dict[str, list[str]] = {}
    _walk(Settings, "KEFU_", scalars, patterns)
    return scalars, patterns


def _tables(text: str) -> list[tuple[str, list[str]]]:
    """Each markdown table as (its header's first cell, the first cell of each row), with the
    line on which it starts remembered by position in the list."""
    tables: list[tuple[str, list[str]]] = []
    rows: list[str] | None = None
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if cells is None:
            rows = None
        elif rows is None:
            rows = []
            tables.append((cells[0], rows))
        elif not set(cells[0]) <= {"-", ":"}:
            rows.append(cells[0])
    return tables


def _expand(cell: str) -> list[str]:
    """`KEFU_A__B`, `__C` in one cell lists KEFU_A__B and KEFU_A__C."""
    names: list[str] = []
    for token in re.findall(r"`([^`]+)`", cell):
        if token.startswith("KEFU_"):
            names.append(token)
        elif token.startswith("__") and names:
            names.append(names[-1].rsplit("__", 1)[0] + token)
    return names


def _documented_variables(text: str) -> list[str]:
    return [name for header, rows in _tables(text) if header == "variable" for cell in rows for name in _expand(cell)]


def test_every_setting_is_documented():
    scalars, _ = _settings()
    documented = set(_documented_variables(CONFIGURATION.read_text("utf-8")))
    missing = [variable for variable in scalars if variable not in documented]
    assert not missing, f"docs/configuration.md lists no row for {missing}"


def test_every_documented_variable_is_a_setting():
    scalars, _ = _settings()
    stale = [name for name in _documented_variables(CONFIGURATION.read_text("utf-8")) if name not in scalars]
    assert not stale, f"docs/configuration.md documents settings that no longer exist: {stale}"


def test_every_field_of_a_dict_valued_setting_is_documented_as_a_pattern():
    """The doc names the pattern, then a table (header `field`) lists every field of one entry."""
    text = CONFIGURATION.read_text("utf-8")
    _, patterns = _settings()
    assert patterns, "the walk found no dict-valued setting (agent profiles): the test lost its subject"
    for pattern, fields in patterns.items():
        assert f"`{pattern}<FIELD>`" in text, f"docs/configuration.md does not name the pattern {pattern}<FIELD>"
        after = text[text.index(f"`{pattern}<FIELD>`") :]
        header, rows = next((header, rows) for header, rows in _tables(after) if header == "field")
        listed = [token for cell in rows for token in re.findall(r"`([a-z0-9_]+)`", cell)]
        assert sorted(set(listed)) == sorted(fields), f"{pattern}: the table lists {listed}, the settings {fields}"


def _known(name: str, scalars: list[str], patterns: dict[str, list[str]]) -> bool:
    """A variable, a section's prefix (`KEFU_AGENT__OPENAI__…`), or an entry of a pattern."""
    if name in scalars or name in OTHER_VARIABLES:
        return True
    if name.endswith(("__", "*")) and any(variable.startswith(name.rstrip("*")) for variable in scalars):
        return True
    for pattern, fields in patterns.items():
        head = pattern.split(NAME)[0]
        if name.startswith(head):
            rest = name[len(head) :].split("__")  # <ENTRY>__<FIELD>, or <ENTRY>__ for a prefix
            if len(rest) == 2 and (rest[1] == "" or rest[1].lower() in fields):
                return True
    return False


def test_the_docs_name_no_setting_that_does_not_exist():
    """Prose names a nested variable (`KEFU_X__Y`): it must exist. Names without `__` are read
    only in the settings table, as the same spelling is also an error code's (KEFU_MEDIA_INVALID)."""
    scalars, patterns = _settings()
    for path in (CONFIGURATION, README):
        text = path.read_text("utf-8").replace(NAME, "ENTRY").replace("<FIELD>", "")
        # A trailing `__` or `*` is a prefix (`KEFU_AGENT__OPENAI__…`, `KEFU_DINGTALK__READ_STATUS_*`);
        # a single trailing `_` is punctuation.
        found = (name if name.endswith(("__", "*")) else name.rstrip("_") for name in VARIABLE.findall(text))
        names = {name for name in found if "__" in name}
        unknown = sorted(name for name in names if not _known(name, scalars, patterns))
        assert not unknown, f"{path.name} names settings that do not exist: {unknown}"


def test_the_walk_finds_what_the_settings_define():
    """Guards the walk itself: nested sections, two levels deep, and the profiles pattern."""
    scalars, patterns = _settings()
    assert {"KEFU_ALERTS__WEBHOOK_URL", "KEFU_MEMORY__RECALL__MAX_BLOCKS", "KEFU_SIMULATOR__BUYER__VISION"} <= set(
        scalars
    )
    assert "KEFU_AGENT" not in scalars and "KEFU_AGENT__PROFILES" not in scalars
    assert "persona" in patterns["KEFU_AGENT__PROFILES__<NAME>__"]
    assert _expand("`KEFU_A__B__C`, `__D`") == ["KEFU_A__B__C", "KEFU_A__B__D"]


# A benchmark's figure in prose: "30 statements in 6 transactions", "1.2 ms per message",
# "412 messages/s", "p95 38 ms". Any of them in the README goes stale with the next change.
FIGURES = re.compile(
    r"\d[\d,.]*\s*(statements?|transactions?)\b"
    r"|\d[\d,.]*\s*(ms|µs|us|s)\b\s*(per|/|a)\s*(message|turn|send|page|reply)"
    r"|\d[\d,.]*\s*(messages?|turns?|replies|sends|pages)\s*(/\s*s\b|per second|a second)"
    r"|\bp(50|90|95|99)\b\s*(of\s*)?[\d.,]+\s*(ms|s)\b"
    r"|\d[\d,.]*\s*(msg/s|ms/s)"
    r"|\b0\.\d\d+\s*/\s*0\.\d\d+",  # recall scores, any@1 / any@5
    re.IGNORECASE,
)


def _prose(text: str) -> str:
    """The README without its fenced blocks (commands and sample output may show numbers)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


# A duration or size in a paragraph that names a benchmark is that benchmark's result.
NEAR_A_BENCH = re.compile(r"\d[\d,.]*\s*(ms|µs|MB|GB)\b")


def test_the_readme_quotes_no_benchmark_figure():
    prose = _prose(README.read_text("utf-8"))
    quoted = [match.group(0) for match in FIGURES.finditer(prose)]
    for paragraph in re.split(r"\n\s*\n", prose):
        if "bench." in paragraph:
            quoted += [match.group(0) for match in NEAR_A_BENCH.finditer(paragraph)]
    assert not quoted, f"README.md quotes benchmark figures {quoted}: point to `python -m bench.X` instead"


def test_the_figure_pattern_catches_what_the_readme_used_to_quote():
    figures = ("30 statements in 6 transactions", "1.9 ms per message", "850 messages/s", "p95 of 40 ms", "0.59 / 0.73")
    for figure in figures:
        assert FIGURES.search(figure), figure
    assert not FIGURES.search("KEFU_SHARD_LEASE_S (15 s) is renewed every quarter")
    assert NEAR_A_BENCH.search("a conversation 2 ms") and not NEAR_A_BENCH.search("10,000 customers")
