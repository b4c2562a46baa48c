"""CLI tables at 80 columns: an id, a code or a time is never cut or broken across lines."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from rich.cells import cell_len

from worker.cli.common import console, print_table

ACCOUNT = "shop-really-long-account-identifier-0001"


@pytest.fixture
def at_80(kefu) -> Iterator[None]:  # `kefu`: the test's settings, whose words are English
    width = console.width
    console.width = 80
    yield
    console.width = width


def printed(*args: object, **kwargs: object) -> list[str]:
    with console.capture() as captured:
        print_table(*args, **kwargs)  # type: ignore[arg-type]
    return captured.get().splitlines()


def test_a_wide_table_becomes_records_with_every_value_whole(at_80):
    columns = ["id", "platform", "identity", "workspace", "revision", "connection_intent", "listener_state"]
    rows = [[ACCOUNT, "dingtalk", "robot-code-0123456789", "default", "3", "connected", "failed"]]
    lines = printed("accounts", columns, rows)
    assert max(cell_len(line) for line in lines) <= 80  # terminal cells: a CJK character takes two
    assert "  id                 " + ACCOUNT in lines and "  listener_state     failed" in lines


def test_a_table_that_fits_stays_a_table_and_only_the_preview_wraps(at_80):
    preview = "这是一条很长的顾客消息，用来看预览列会不会换行而不是把编号截断。" * 2
    conversation = "cidDirect-0123456789abcdef"
    rows = [[conversation, "2026-12-02 20:02:57", preview]]
    lines = printed("customers", ["conversation", "last_activity_at", "preview"], rows, flexible="preview")
    assert lines[1].startswith("┏")  # a table
    assert any(conversation in line and "2026-12-02 20:02:57" in line for line in lines)
    assert len([line for line in lines if line.startswith("│")]) > 2  # the preview wrapped onto more lines
    assert all(cell_len(line) <= 80 for line in lines)
