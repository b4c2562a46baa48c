"""Out-of-range input is an answer, never a 500 or a traceback, and what is stored is bounded
(issue 38, item 10: over-long ids, a 60 KB take-over reason)."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from runtime.admission.handling import MAX_REASON_CHARS, handling_state, pause_handling
from runtime.inbound.ingest import ingest_page
from runtime.operators.accounts import Role, add_operator
from worker.cli import cli

HUGE = "99999999999999999999999"


def signed_in(client: TestClient) -> None:
    token = client.get("/login").text.split('name="csrf" value="')[1].split('"')[0]
    client.post("/login", data={"csrf": token, "name": "victor", "password": "viewer-pass-1"})


def test_an_id_past_sqlites_integers_is_no_page_in_the_console(settings, store, shop):
    from worker.console import create_app
    from worker.context import WorkerRuntime

    add_operator(store, "victor", Role.VIEWER, "viewer-pass-1")
    with TestClient(create_app(WorkerRuntime(settings)), raise_server_exceptions=False) as client:
        signed_in(client)
        pages = [client.get(f"/c/{HUGE}"), client.get(f"/c/{HUGE}/events"), client.get("/c/999999999999999999")]
    assert [page.status_code for page in pages] == [404, 404, 404]


@pytest.mark.parametrize("command", [["history", HUGE], ["pause", HUGE], ["send", HUGE, "你好"], ["history", "0"]])
def test_an_id_past_sqlites_integers_is_a_kefu_code_in_the_cli(kefu, store, command):
    result = kefu.invoke(cli, command)
    assert result.exit_code == 2 and "KEFU_INVALID_INPUT" in result.output
    assert "Traceback" not in result.output and not isinstance(result.exception, OverflowError)


def test_a_take_over_reason_is_kept_to_a_line(store, shop, platform, transport):
    said = platform.buyer_says(shop, "b1", "张三", "在吗")
    [customer] = ingest_page(store, transport.page_of(shop, [said])).customer_ids
    pause_handling(store, customer, "原因" * 30_000)
    reason = handling_state(store, customer).reason
    assert reason is not None and len(reason) == MAX_REASON_CHARS and reason.endswith("…")
