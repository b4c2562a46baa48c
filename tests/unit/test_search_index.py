"""The conversation search reads an index of what was said (V32's trigram index, kept by
triggers): three characters or more are found in the index, fewer by a scan of its rows, and
either way a search is a plain substring of a name, a text, a file's name or what a voice
message was heard to say, whatever characters it holds."""

from __future__ import annotations

import pytest

from runtime.customers import search_index
from runtime.customers.summaries import list_customers
from runtime.inbound.ingest import ingest_page
from runtime.store.migrations import V32


def say(store, transport, platform, buyer: str, name: str, text: str) -> int:
    page = transport.page_of("shop", [platform.buyer_says("shop", buyer, name, text)])
    return ingest_page(store, page).customer_ids[0]


def found(store, search: str) -> list[int]:
    return sorted(row.id for row in list_customers(store, "simulation", search=search))


@pytest.fixture
def buyers(store, shop, transport, platform) -> dict[str, int]:
    return {
        "b1": say(store, transport, platform, "b1", "张三", "请问什么时候发货？订单ABC-42"),
        "b2": say(store, transport, platform, "b2", "李四", '退款 "NEAR" OR 50%_off*'),
        "b3": say(store, transport, platform, "b3", "王五", "在吗"),
    }


@pytest.mark.parametrize(
    ("search", "who"),
    [
        ("什么时候发货", ["b1"]),  # in the index
        ("abc-42", ["b1"]),  # ASCII case folded, as LIKE does
        ("发货", ["b1"]),  # two characters: a scan of the index's rows
        ("货", ["b1"]),
        ("李四", ["b2"]),  # a name
        ("王五", ["b3"]),
        ('"NEAR" OR', ["b2"]),  # the index's query words and quotes are plain text
        ('"', ["b2"]),
        ("50%_off*", ["b2"]),  # so are LIKE's wildcards
        ("50x_off", []),
        ("在吗", ["b3"]),
        ("发货了吗", []),
    ],
)
def test_a_search_is_a_plain_substring_whatever_its_length(store, buyers, search, who):
    assert found(store, search) == sorted(buyers[b] for b in who)


def test_a_message_stored_later_is_found_and_one_pruned_is_not(store, transport, platform, buyers):
    later = say(store, transport, platform, "b4", "赵六", "发票抬头写公司名称")
    assert found(store, "发票抬头") == [later]  # the search indexed it first
    with store.write() as conn:  # as retention or a move takes it: the row goes, its index entry too
        conn.execute("DELETE FROM inbound_message WHERE customer_id = :c", {"c": later})
    assert found(store, "发票抬头") == [] and found(store, "发票") == []


def test_a_message_rewritten_after_it_was_indexed_is_found_by_its_new_words_only(store, buyers):
    assert found(store, "在吗") == [buyers["b3"]]
    with store.write() as conn:  # as a media fetch rewrites a body
        conn.execute("UPDATE inbound_message SET body = '改成别的话' WHERE customer_id = :c", {"c": buyers["b3"]})
    assert found(store, "在吗") == [] and found(store, "改成别的") == [buyers["b3"]]


def test_a_message_stored_under_the_id_a_deleted_newest_one_left_free_is_found(store, transport, platform, buyers):
    gone = say(store, transport, platform, "b4", "赵六", "这句会被删掉")
    assert found(store, "会被删掉") == [gone]
    with store.write() as conn:
        freed = conn.execute("SELECT max(id) FROM inbound_message").scalar_one()
        conn.execute("DELETE FROM inbound_message WHERE customer_id = :c", {"c": gone})
    again = say(store, transport, platform, "b5", "钱七", "新来的一句话")
    with store.read() as conn:  # SQLite gave the next message the freed id, under the index's mark
        assert conn.execute("SELECT max(id) FROM inbound_message").scalar_one() == freed
    assert found(store, "新来的") == [again] and found(store, "会被删掉") == []


def test_newest_messages_deleted_with_unindexed_ones_leave_no_id_the_index_skips(store, transport, platform, buyers):
    """Indexed and not yet indexed messages deleted in one statement (an erasure, a move away):
    the ids SQLite gives next are above the mark, whichever of them the deletion met last."""
    gone = say(store, transport, platform, "b4", "赵六", "先被索引的一句")
    assert found(store, "先被索引") == [gone]  # indexed: the mark is at its id
    for text in ("还没索引的一句", "也还没索引"):
        say(store, transport, platform, "b4", "赵六", text)
    with store.write() as conn:
        conn.execute("DELETE FROM inbound_message WHERE customer_id = :c", {"c": gone})
    again = say(store, transport, platform, "b5", "钱七", "删掉之后的新消息")
    assert found(store, "删掉之后") == [again] and found(store, "索引") == []


def test_a_catch_up_indexes_in_batches_each_moving_the_mark(store, transport, platform, buyers, monkeypatch):
    monkeypatch.setattr(search_index, "BATCH", 2)
    for n in range(5):
        say(store, transport, platform, f"c{n}", f"顾客{n}", f"第{n}个问题")
    assert search_index.catch_up(store) == 8  # the fixture's 3 and these 5, two at a time
    assert search_index.catch_up(store) == 0
    assert len(found(store, "个问题")) == 5


def test_an_upgraded_store_finds_what_it_held_before_the_index(store, buyers):
    """V32 starts with an empty index; the first search's catch-up indexes what the store holds."""
    with store.write() as conn:  # the store as V31 left it: no index, no triggers
        for trigger in ("message_search_delete", "message_search_update"):
            conn.execute(f"DROP TRIGGER {trigger}")
        conn.execute("DROP TABLE message_search")
        conn.execute("DROP TABLE search_state")
    with store.write() as conn:
        for statement in V32.statements:
            conn.execute(statement)
    assert found(store, "什么时候") == [buyers["b1"]] and found(store, "李四") == [buyers["b2"]]
    assert found(store, "在吗") == [buyers["b3"]]
