"""Memory chunking, titles and the tokenizer: exact concatenation and sentence boundaries as
properties over arbitrary text (CJK, emoji, lone surrogates, numbers and versions)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.memory.chunking import CJK_END, LATIN_END, chunk_text, split_sentences
from runtime.memory.folders import ArchivedMessage, plan_folders

PIECES = st.sampled_from(
    ["你好", "。", "！", "？", "；", "…", "\n", " ", ".", "!", "?", ";", "3.14", "v1.2.0", "a", "word", "😀", "”", ")"]
)
TEXT = st.one_of(st.text(max_size=300), st.lists(PIECES, max_size=80).map("".join))


@settings(max_examples=300, deadline=None)
@given(TEXT, st.integers(min_value=1, max_value=60))
def test_chunks_concatenate_to_the_original_and_end_at_sentence_ends(text, target):
    sentences = split_sentences(text)
    assert "".join(sentences) == text
    chunks = chunk_text(text, target)
    assert "".join(chunks) == text
    for sentence in sentences[:-1]:  # every sentence but the last ends at a terminator or newline
        body = sentence.rstrip(" \t")
        assert body.endswith("\n") or body.rstrip("”’」』）)]\"'")[-1:] in CJK_END + LATIN_END
    boundaries = {sum(map(len, chunks[: i + 1])) for i in range(len(chunks))}
    sentence_ends = {sum(map(len, sentences[: i + 1])) for i in range(len(sentences))}
    assert boundaries <= sentence_ends  # chunks hold whole sentences
    for chunk in chunks:  # only a chunk of one sentence may exceed the target
        assert len(chunk) <= target or len(split_sentences(chunk)) == 1


def test_numbers_and_versions_are_not_sentence_ends_and_surrogates_stay_together():
    text = "圆周率是3.14。请升级到v1.2.0, then restart. Done"
    assert split_sentences(text) == ["圆周率是3.14。", "请升级到v1.2.0, then restart. ", "Done"]
    paired = "\ud83d\ude00。\ud83d\ude00"  # a surrogate pair kept as two code points
    assert all(not piece.endswith("\ud83d") for piece in chunk_text(paired, 1))


def test_titles_come_from_user_messages_are_capped_and_numbered_when_repeated():
    msgs = [
        ArchivedMessage(role="user", text="  我想 退货\n", at_ms=10),
        ArchivedMessage(role="assistant", text="好的" * 10, at_ms=20),
        ArchivedMessage(role="user", text="我想 退货", at_ms=30),
        ArchivedMessage(role="tool", text="", at_ms=40),
        ArchivedMessage(role="user", text="这是一条非常非常非常非常非常非常非常非常长的问题对吧", at_ms=50),
    ]
    folders = plan_folders(msgs, target_chars=20)
    assert "".join(f.text for f in folders) == "".join(f"{m.role}: {m.text}\n" for m in msgs)
    assert [f.title for f in folders] == [
        "我想 退货（1）",  # duplicates within one run get their folder number
        "我想 退货（2）",  # an assistant-only folder inherits the nearest earlier user message
        "我想 退货（3）",
        "这是一条非常非常非常非常非常非常非常非常长的问题",  # capped at 24 code points
    ]
    assert len(folders[-1].title) == 24
    assert [(f.event_from, f.event_to) for f in folders][:2] == [(10, 10), (20, 20)]
    assert plan_folders([ArchivedMessage(role="tool", text=" ", at_ms=1)])[0].title == "第1段对话"
