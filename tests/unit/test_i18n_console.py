"""The console speaks the operator's language (issue 41, item 5): every word its templates say
is an English msgid marked for gettext, and the Chinese catalog has each one, with the same
placeholders; no template says a word outside gettext, so nothing untranslatable creeps back
in. The browser's view of it is tests/integration/test_console_chinese.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir, extract_from_file
from babel.messages.pofile import read_po

from config import load_settings
from runtime.admission.handling import pause_handling
from runtime.inbound.ingest import ingest_page
from runtime.operators.accounts import Role, add_operator, operator_named
from worker.i18n import catalog_path

CONSOLE = Path(__file__).parents[2] / "worker" / "console"
TEMPLATES = CONSOLE / "templates"
WORDS = CONSOLE.parent / "transcript_words.py"
METHODS = [("**/templates/**.html", "jinja2.ext.babel_extract"), ("*.py", "python")]
OPTIONS = {"**/templates/**.html": {"extensions": "jinja2.ext.i18n", "newstyle_gettext": "true"}}
PLACEHOLDER = re.compile(r"%\((\w+)\)[sd]")

Key = tuple[str, str | None]  # (msgid, context)


def said() -> dict[Key, list[str]]:
    """Every msgid the console marks (templates and worker/console/*.py, and how a transcript
    line reads: worker/transcript_words.py), with where."""
    found: dict[Key, list[str]] = {}
    for filename, lineno, message, _, context in extract_from_dir(str(CONSOLE), METHODS, options_map=OPTIONS):
        for msgid in message if isinstance(message, tuple) else (message,):
            if msgid:
                found.setdefault((msgid, context), []).append(f"{filename}:{lineno}")
    for lineno, message, _, context in extract_from_file("python", WORDS):
        found.setdefault((message, context), []).append(f"transcript_words.py:{lineno}")
    return found


def catalog() -> Catalog:
    with catalog_path("zh_CN", "console").open("rb") as po:
        return read_po(po, locale="zh_CN", domain="console")


def gap(msgid: str, context: str | None, chinese: Catalog) -> str | None:
    """What is wrong with msgid's translation, or None."""
    message = chinese.get(msgid, context=context)
    if message is None:
        return "missing"
    strings = message.string if isinstance(message.string, tuple) else (message.string,)
    if not all(strings) or message.fuzzy:
        return "no translation" if not all(strings) else "fuzzy"
    wanted = sorted(set(PLACEHOLDER.findall(msgid)))
    for string in strings:
        if sorted(set(PLACEHOLDER.findall(string))) != wanted:
            return f"placeholders {sorted(set(PLACEHOLDER.findall(string)))} instead of {wanted}"
        try:  # newstyle gettext formats every message: a stray % fails the page
            string % dict.fromkeys(wanted, "x")
        except (ValueError, TypeError, KeyError) as error:
            return f"does not format ({error})"
    return None


def test_every_word_of_the_console_has_its_chinese_with_the_same_placeholders():
    chinese = catalog()
    gaps = [
        f"{where[0]}: {msgid!r}: {problem}"
        for (msgid, context), where in said().items()
        if (problem := gap(msgid, context, chinese))
    ]
    header = catalog_path("zh_CN", "console").read_text(encoding="utf-8")
    assert '"Language: zh_CN\\n"' in header and '"Plural-Forms: nplurals=1; plural=0;\\n"' in header
    assert '"Content-Type: text/plain; charset=utf-8\\n"' in header
    assert not gaps, "console.po lacks:\n" + "\n".join(gaps)


def test_the_catalog_keeps_no_word_the_console_no_longer_says():
    used = set(said())
    stale = [message.id for message in catalog() if message.id and (message.id, message.context) not in used]
    assert not stale, f"console.po has msgids no template or module says: {stale}"


JINJA = re.compile(r"\{#.*?#\}|\{\{.*?\}\}|\{%.*?%\}", re.S)
CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]+")
TAG = re.compile(r"<[^>]*>", re.S)
SHOWN_ATTRIBUTE = re.compile(r"""\b(?:placeholder|title|alt|aria-label)\s*=\s*(["'])(.*?)\1""", re.S)
WORD = re.compile(r"[A-Za-z]{2,}")


def bare_text(template: Path) -> str:
    """The template's own text: what it says outside {{ }}, {% %} and {# #} (each replaced by as
    many newlines as it spanned, so line numbers hold)."""
    return JINJA.sub(lambda found: "\n" * found.group().count("\n"), template.read_text(encoding="utf-8"))


def offending(text: str, pattern: re.Pattern[str]) -> list[str]:
    return [f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group()!r}" for m in pattern.finditer(text)]


@pytest.mark.parametrize("template", sorted(TEMPLATES.glob("*.html")), ids=lambda path: path.name)
def test_a_template_says_no_chinese_outside_gettext(template):
    assert not offending(bare_text(template), CJK), f"{template.name}: Chinese outside _(): put it in console.po"


@pytest.mark.parametrize("template", sorted(TEMPLATES.glob("*.html")), ids=lambda path: path.name)
def test_a_template_says_no_english_outside_gettext(template):
    """Text between tags and the attributes people read (placeholder, title, alt, aria-label)."""
    text = bare_text(template)
    attributes = "\n".join(found.group(2) for found in SHOWN_ATTRIBUTE.finditer(text))
    between_tags = re.sub(r"&#?\w+;", " ", TAG.sub(lambda found: "\n" * found.group().count("\n"), text))
    words = offending(between_tags, WORD) + [f"attribute {w}" for w in WORD.findall(attributes)]
    assert not words, f"{template.name}: English outside _(): {words}"


# -- the words as a page shows them -------------------------------------------------------

SPOOF = "投诉\u202e"  # an operator's reason that would reorder what follows it


@pytest.fixture
def waiting(store, shop, platform, transport) -> int:
    """A buyer the agent handed off, nobody took yet, with a reason that tries to disguise itself."""
    said = platform.buyer_says(shop, "b1", "张三", "在吗")
    customer = ingest_page(store, transport.page_of(shop, [said])).customer_ids[0]
    pause_handling(store, customer, SPOOF, handoff=True)
    add_operator(store, "alice", Role.OPERATOR, "operator-pass-1")
    return customer


def live_fragment(settings, store, customer: int, language: str, monkeypatch) -> str:
    from worker.console import create_app
    from worker.context import WorkerRuntime

    monkeypatch.setenv("KEFU_LANGUAGE", language)
    app = create_app(WorkerRuntime(load_settings(data_dir=settings.data_dir)))
    return app.state.console.live_fragment(customer, operator_named(store, "alice"), "token")


def test_the_live_part_of_a_conversation_says_chinese_by_default_and_keeps_raw_values_for_scripts(
    settings, store, waiting, monkeypatch
):
    shown = live_fragment(settings, store, waiting, "zh_CN", monkeypatch)
    assert 'data-status="waiting"' in shown
    assert '<span class="status-tag waiting" id="conversation-status">待处理</span>' in shown
    assert 'id="take-over">接管</button>' in shown and "未分配" in shown and 'placeholder="接管原因"' in shown
    # an outside value passed into a translated sentence is shown as every value is: disguise visible
    assert "人工接待中：投诉\\u202e" in shown and "\u202e" not in shown


def test_the_live_part_of_a_conversation_says_english_by_setting(settings, store, waiting, monkeypatch):
    shown = live_fragment(settings, store, waiting, "en", monkeypatch)
    assert 'id="take-over">take over</button>' in shown and "unassigned" in shown
    assert "a human handles this conversation: 投诉\\u202e" in shown and "\u202e" not in shown
    controls = shown.split('<ol class="transcript"')[0]  # the lines' labels are runtime's, in Chinese
    assert not CJK.search(controls.replace("投诉", ""))
