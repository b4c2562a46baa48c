"""The recall tokenizer on both scripts: CJK bigrams; Latin words case-folded, without function
words, as written and as stems, compounds split as well as kept; dates in the forms people ask
for; the same analysis for a folder's text and a question."""

from __future__ import annotations

from runtime.memory.tokenize import STOPWORDS, tokens


def test_cjk_runs_become_bigrams_and_a_lone_character_stays():
    assert tokens("订单A12345买的是羽绒被") == ["a12345", "订单", "买的", "的是", "是羽", "羽绒", "绒被"]
    assert tokens("好") == ["好"]


def test_latin_words_fold_case_drop_function_words_and_keep_form_and_stem():
    assert tokens("Does HIS Painting sell?") == ["painting", "paint", "sell"]
    assert set(tokens("she painted")) & set(tokens("paints")) == {"paint"}  # forms meet on the stem
    assert tokens("painting").count("painting") == 1  # the very form asked for counts on its own too
    assert not set(tokens("which does his the and it i")) and {"does", "which", "his"} <= STOPWORDS


def test_possessives_contractions_compounds_and_codes():
    assert tokens("Caroline's") == ["caroline", "carolin"]
    assert tokens("don't") == []  # "don" and "t" are function-word pieces
    assert tokens("well-known author") == ["well-known", "known", "author"]
    assert tokens("v1.2.0 A-1024") == ["v1.2.0", "a-1024"]  # codes stay whole


def test_small_numbers_and_times_are_no_tokens_but_order_numbers_are():
    assert tokens("at 14:00 on the 3rd, 12 items") == ["items", "item"]
    assert "10240" in tokens("order 10240")


def test_dates_give_year_month_and_day_in_every_written_form():
    iso = set(tokens("[2023-05-08 14:00] [counterpart Caroline] hi"))
    assert {"2023", "may", "may-8"} <= iso
    for asked in ("8 May 2023", "May 8, 2023", "May 8th", "the 8th of May"):
        assert "may-8" in tokens(asked), asked
    assert {"may", "2023"} <= set(tokens("What did she do in May 2023?"))
    assert "may" not in tokens("I may go there")  # a modal verb, not the month
    assert tokens("Sept 9th") == ["september", "september-9"]
    assert tokens("in June") == ["june"] and tokens("june") == tokens("Jun")


def test_a_question_and_the_folder_holding_its_answer_share_tokens():
    folder = tokens("user: [2023-05-08 14:00] [counterpart Melanie] I painted a sunrise over the lake today")
    question = tokens("When did Melanie paint a sunrise in May 2023?")
    assert {"melani", "paint", "sunris", "may", "2023"} <= set(folder) & set(question)
