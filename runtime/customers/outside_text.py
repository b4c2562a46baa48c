"""Text from outside (a buyer, a platform, a model) as people are shown it and as they search for
it. A terminal obeys control sequences and every screen obeys bidi overrides, so a buyer's name
could retitle an operator's window or pass for another buyer's; both the CLI and the console show
such characters as visible escapes instead (issue 38)."""

from __future__ import annotations

import re

# C0 and C1 controls but tab and newline (ESC starts the sequences that retitle a window or
# rewrite the screen), and the characters that reorder or hide text: bidi embeddings, overrides
# and isolates, zero-width spaces and joiners, the byte-order mark.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")

SEARCH_MAX_CHARS = 100  # longer than any name or phrase an operator types; a search scans every line


def visible(text: str) -> str:
    """`text` with each unsafe character as a visible escape (`\\u202e`)."""
    return UNSAFE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def search_text(typed: str) -> str:
    """What a search looks for: `typed` without unsafe characters (SQLite's LIKE ends a pattern at
    NUL, so `%00` would match everything), trimmed, at most SEARCH_MAX_CHARS. Empty when nothing
    searchable was typed: such a search matches nothing."""
    return UNSAFE.sub("", typed).strip()[:SEARCH_MAX_CHARS]
