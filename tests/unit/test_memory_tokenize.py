"""The recall tokenizer on both scripts: Chinese words (jieba) without function words; Latin
words case-folded, without function words, as written and as stems, compounds split as well as
kept; dates in the forms people ask for, Chinese ones and relative ones too; the same analysis
for a folder's text and a question."""

from __future__ import annotations

from datetime import date, datetime

import pytest

from runtime.memory.time_expressions import Mention, mentions, point
from runtime.memory.time_window import time_query
from runtime.memory.tokenize import STOPWORDS, ZH_STOPWORDS, tokens

ASKED = date(2024, 5, 8)  # a Wednesday


def test_chinese_becomes_words_and_their_pieces_never_bigrams_across_two_words():
    assert tokens("订单A12345买的是羽绒被") == ["a12345", "订单", "买", "羽绒", "羽绒被"]
    assert {"科幻", "电影", "科幻电影"} <= set(tokens("我想看科幻电影"))  # a question's 电影 meets it
    assert not {"的是", "是羽", "绒被"} & set(tokens("订单A12345买的是羽绒被"))


def test_chinese_function_words_and_question_frames_are_no_tokens():
    assert tokens("你还记得我的名字是什么吗") == ["名字"]
    assert tokens("好") == [] and {"的", "什么", "还记得"} <= ZH_STOPWORDS


def test_mixed_chinese_and_latin_and_product_codes():
    assert tokens("型号ABC-123的保温杯，iPhone15手机壳") == [
        *("abc-123", "iphone15"),
        *("型号", "保温", "保温杯", "手机", "壳"),
    ]
    assert tokens("要XL码的") == ["xl", "码"]


@pytest.mark.parametrize(
    ("said", "named"),
    [
        ("4月27号下的单", {"april", "april-27"}),
        ("5月6日", {"may", "may-6"}),
        ("五月六号那天", {"may", "may-6"}),
        ("二〇二四年", set()),  # a year in words: not read
        ("2024年5月6日", {"2024", "may", "may-6", "monday"}),
        ("2023年12月份", {"2023", "december"}),
        ("十二月份", {"december"}),
        ("周三那天", {"wednesday"}),
    ],
)
def test_chinese_dates_give_the_tokens_english_and_iso_ones_do(said, named):
    found = set(tokens(said))
    assert named <= found and not {"月", "号", "日"} & found


@pytest.mark.parametrize(
    ("said", "day"),
    [
        ("昨天买的", date(2024, 5, 7)),
        ("前天晚上说的", date(2024, 5, 6)),
        ("大前天", date(2024, 5, 5)),
        ("三天前", date(2024, 5, 5)),
        ("上周五", date(2024, 5, 3)),
        ("上个星期二", date(2024, 4, 30)),
        ("这周一", date(2024, 5, 6)),
    ],
)
def test_relative_days_are_dated_from_the_day_they_were_said(said, day):
    assert Mention.of(day) in mentions(said, ASKED)
    assert f"{day:%B}".lower() + f"-{day.day}" in tokens(said, ASKED)
    assert all(m.day is None for m in mentions(said))  # no anchor: no day (a weekday at most)


def test_in_archived_text_a_relative_day_is_dated_from_its_own_lines_label():
    folder = tokens(
        "[2024-04-27 10:02] [counterpart 张三] 我昨天买的保温杯\n[2024-05-02 09:00] [counterpart 张三] 前天到货了"
    )
    assert {"april-26", "april-30"} <= set(folder)
    assert "april-26" in tokens("4月26号我买了什么") and "april-26" in tokens("上周五买的", date(2024, 5, 1))


@pytest.mark.parametrize("said", ["目前天气不错", "之前晚上说的", "3个月", "一个月后", "早上月饼"])
def test_words_that_merely_contain_a_time_word_name_no_day(said):
    assert mentions(said, ASKED) == []


def test_memory_recalls_time_filters_accept_chinese_dates():
    from zoneinfo import ZoneInfo

    zone = ZoneInfo("Asia/Shanghai")
    now = int(datetime(2024, 5, 8, 15, tzinfo=zone).timestamp() * 1000)
    [day, *_] = time_query("昨天", None, zone, now).windows
    assert (day.level, day.start_ms) == ("day", int(datetime(2024, 5, 7, tzinfo=zone).timestamp() * 1000))
    assert point("4月27号", ASKED) == (date(2024, 4, 27), "day")
    assert point("12月", ASKED) == (date(2023, 12, 1), "month")  # the latest December so far
    assert point("去年", ASKED) == (date(2023, 1, 1), "year")
    assert time_query("某天", None, zone, now).warnings  # names no day: said so, no constraint


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
