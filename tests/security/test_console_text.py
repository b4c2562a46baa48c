"""What came from outside cannot disguise itself on an operator's screen, and a search finds what
was said, nothing else (issue 38, item 10: bidi overrides and zero-width characters in names,
searches matching image metadata, `%00` matching every customer)."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from runtime.customers.outside_text import SEARCH_MAX_CHARS, search_text, visible
from runtime.customers.summaries import list_customers
from runtime.inbound.ingest import ingest_page
from runtime.inbound.pages import FileContent
from runtime.operators.accounts import Role, add_operator
from transports.simulator.platform import BuyerMedia

SPOOF = "张\u202e三\u200b"  # reads as another buyer's name once reordered and with a hidden space


@pytest.fixture
def said(store, shop, platform, transport):
    """Three buyers: one with a spoofing name, one who sent a photo and a file, one plain."""
    said = [
        platform.buyer_says(shop, "b1", SPOOF, "在吗"),
        platform.buyer_says(shop, "b2", "李四", "", media=BuyerMedia(kind="image", name="p.png", data=b"\x89PNG")),
        platform.buyer_says(shop, "b2", "李四", "发票"),
        platform.buyer_says(shop, "b3", "王五", "请问什么时候发货"),
    ]
    pages = [transport.page_of(shop, [message]) for message in said]
    [invoice] = pages[2].groups[0].messages  # a file, as DingTalk and Wangwang pages carry one
    file = invoice.model_copy(update={"content": FileContent(ref="code-1", name="发票.pdf")})
    pages[2] = pages[2].model_copy(update={"groups": [pages[2].groups[0].model_copy(update={"messages": [file]})]})
    return {m.buyer_id: ingest_page(store, page).customer_ids[0] for m, page in zip(said, pages, strict=True)}


def test_a_name_that_reorders_or_hides_text_is_shown_with_visible_escapes(settings, store, said):
    from worker.console import create_app
    from worker.context import WorkerRuntime

    add_operator(store, "victor", Role.VIEWER, "viewer-pass-1")
    with TestClient(create_app(WorkerRuntime(settings))) as client:
        token = client.get("/login").text.split('name="csrf" value="')[1].split('"')[0]
        client.post("/login", data={"csrf": token, "name": "victor", "password": "viewer-pass-1"})
        pages = [client.get("/?source=simulation").text, client.get(f"/c/{said['b1']}").text]
    for page in pages:
        assert "\u202e" not in page and "\u200b" not in page
        assert "张\\u202e三\\u200b" in page


@pytest.mark.parametrize("looked_for", ["sha256", "ref", '"media"', "pending", "{", "code-1"])
def test_a_search_never_matches_the_json_kefu_keeps_about_media(store, said, looked_for):
    assert list_customers(store, "simulation", search=looked_for) == []


def test_a_search_finds_what_was_said_a_files_name_and_a_name(store, said):
    assert [row.id for row in list_customers(store, "simulation", search="发货")] == [said["b3"]]
    assert [row.id for row in list_customers(store, "simulation", search="票.pdf")] == [said["b2"]]
    assert [row.id for row in list_customers(store, "simulation", search="李四")] == [said["b2"]]


@pytest.mark.parametrize("typed", ["\x00", "%\x00", "\x1b", "\u202e"])
def test_a_search_of_control_characters_matches_nobody(store, said, typed):
    assert list_customers(store, "simulation", search=typed) == []
    assert len(list_customers(store, "simulation", search=" ")) == 3  # blank: no search at all


def test_a_search_is_bounded():
    assert len(search_text("发" * 100_000)) == SEARCH_MAX_CHARS
    assert search_text(" 张\x00三 ") == "张三" and visible("a\x1b[31mb") == "a\\u001b[31mb"
