"""Sentence-boundary chunking whose pieces concatenate to the original exactly.

A sentence ends after one of 。！？；… (and any run of them), after a newline, or after a Latin
. ! ? ; that is followed by whitespace or the end of the text, so `3.14` and `v1.2.0` stay
whole. A chunk takes whole sentences up to the target length; the sentence that would cross it
starts the next chunk, and a sentence longer than the target stays whole (a chunk may then be
larger than the target). Python strings are code points, so a chunk never splits a surrogate
pair of a valid text, and the splitter never cuts between two code points that are not at a
sentence end.
"""

from __future__ import annotations

CJK_END = "。！？；…"
LATIN_END = ".!?;"
CLOSERS = "”’」』）)]\"'"


def split_sentences(text: str) -> list[str]:
    """The sentences of `text`; `"".join(split_sentences(text)) == text`."""
    sentences: list[str] = []
    start = i = 0
    n = len(text)
    while i < n:
        char = text[i]
        end = None
        if char == "\n":
            end = i + 1
        elif char in CJK_END:
            end = _skip(text, _skip(text, i, CJK_END), CLOSERS)
        elif char in LATIN_END:
            marks = _skip(text, i, LATIN_END)
            after = _skip(text, marks, CLOSERS)
            if after < n and not text[after].isspace():
                i = marks  # 3.14, v1.2.0, a.b: not a sentence end
                continue
            end = _skip(text, after, " \t")
        if end is None:
            i += 1
            continue
        sentences.append(text[start:end])
        start = i = end
    if start < n:
        sentences.append(text[start:])
    return sentences


def _skip(text: str, i: int, chars: str) -> int:
    while i < len(text) and text[i] in chars:
        i += 1
    return i


def chunk_text(text: str, target_chars: int) -> list[str]:
    """Whole sentences packed into chunks of about `target_chars`."""
    if target_chars < 1:
        raise ValueError("target_chars must be at least 1")
    chunks: list[str] = []
    current = ""
    for sentence in split_sentences(text):
        if current and len(current) + len(sentence) > target_chars:
            chunks.append(current)
            current = ""
        current += sentence
    if current:
        chunks.append(current)
    return chunks
