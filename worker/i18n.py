"""The console's and the CLI's words in the operator's language (KEFU_LANGUAGE): Simplified
Chinese by default, English by setting.

Code and templates say their words in English, marked for gettext (`_("take over")` in Python
and in templates): they are the msgids. A language's words come from its catalog,
`worker/locale/<language>/LC_MESSAGES/<domain>.po`, one domain per surface ("console", "cli").
The .po file is both the source and what ships: Babel reads it into memory the first time it is
needed, so there is no compile step to forget. A msgid a catalog lacks is shown in English
(tests/unit/test_i18n.py fails on any such gap).

`KEFU_…` codes, names from outside, identifiers and logs are never translated: they are what
people search for and quote.
"""

from __future__ import annotations

import gettext
from functools import cache
from io import BytesIO
from pathlib import Path
from typing import Literal

Language = Literal["zh_CN", "en"]
Domain = Literal["console", "cli"]
LOCALE_DIR = Path(__file__).parent / "locale"
SOURCE_LANGUAGE = "en"  # the msgids' language: no catalog


def catalog_path(language: str, domain: Domain) -> Path:
    return LOCALE_DIR / language / "LC_MESSAGES" / f"{domain}.po"


@cache
def translations(language: Language, domain: Domain) -> gettext.NullTranslations:
    """The words of `domain` in `language` (English, the msgids themselves, for "en")."""
    if language == SOURCE_LANGUAGE:
        return gettext.NullTranslations()
    from babel.messages.mofile import write_mo  # only when a catalog is read: English commands start sooner
    from babel.messages.pofile import read_po

    with catalog_path(language, domain).open("rb") as po:
        catalog = read_po(po, locale=language, domain=domain)
    compiled = BytesIO()
    write_mo(compiled, catalog, use_fuzzy=False)
    compiled.seek(0)
    return gettext.GNUTranslations(compiled)
