"""A manual send may carry the handling epoch its operator saw (SPEC 3.5, 3.8): when a pause or a
takeover moved it since, the send is refused with KEFU_HANDLING_EPOCH_CHANGED and nothing is
registered; `kefu send --expect-epoch` and the console's form (which carries the epoch the page
showed) use it."""

from __future__ import annotations

import re

import pytest

from runtime.admission.handling import pause_handling, resume_handling
from runtime.errors import KefuError
from runtime.inbound.ingest import ingest_page
from runtime.operators.accounts import Role, add_operator
from runtime.outbox.manual import ManualSend, message_parts, send_manual, send_manual_parts
from worker.cli import cli


def _buyer(store, transport, platform) -> int:
    said = platform.buyer_says("shop", "b1", "张三", "在吗")
    return ingest_page(store, transport.page_of("shop", [said])).customer_ids[0]


def _requests(store) -> list[str]:
    with store.read() as conn:
        return list(conn.execute("SELECT request_id FROM outbox_request ORDER BY request_id").scalars())


def test_a_send_expecting_an_epoch_a_pause_moved_registers_nothing(store, shop, transport, platform):
    customer = _buyer(store, transport, platform)
    sent = send_manual(store, ManualSend(request_id="op-1", customer_id=customer, text="在的", expected_epoch=0))
    assert sent.handling_epoch == 0
    pause_handling(store, customer, "handoff", handoff=True)  # the agent handed off meanwhile: epoch 1
    resume_handling(store, customer)  # and it was handed back: the epoch stays 1
    parts = message_parts("op-2", customer, "尺码表", (b"\x89PNG\r\n\x1a\n" + b"\0" * 64, "chart.png"), None, 0)
    with pytest.raises(KefuError) as refused:
        send_manual_parts(store, parts)
    assert refused.value.code == "KEFU_HANDLING_EPOCH_CHANGED"
    assert "epoch 0, now 1: handled automatically" in refused.value.message
    assert _requests(store) == ["op-1"]  # neither the file nor the text: all or none
    replayed = send_manual(store, ManualSend(request_id="op-1", customer_id=customer, text="在的", expected_epoch=0))
    assert replayed.request_id == "op-1"  # a replay returns what was registered under the epoch of its time
    fresh = send_manual_parts(store, message_parts("op-2", customer, "尺码表", None, None, 1))
    assert [r.request_id for r in fresh] == ["op-2"] and _requests(store) == ["op-1", "op-2"]
    with pytest.raises(ValueError):
        ManualSend(request_id="op-3", customer_id=customer, text="x", expected_epoch=-1)


def test_kefu_send_expect_epoch_is_refused_by_code_once_the_customer_was_taken_over(
    kefu, store, shop, transport, platform
):
    customer = _buyer(store, transport, platform)
    paused = kefu.invoke(cli, ["pause", str(customer), "--reason", "alice"])
    assert "epoch 1" in paused.output  # what an operator (or a script) reads the epoch from
    pause_handling(store, customer, "handoff")  # still paused: the epoch stays 1
    resume_handling(store, customer)
    pause_handling(store, customer, "bob took over")  # epoch 2
    stale = kefu.invoke(cli, ["send", str(customer), "在的", "--request-id", "cli-1", "--expect-epoch", "1"])
    assert stale.exit_code == 2 and "KEFU_HANDLING_EPOCH_CHANGED" in stale.output, stale.output
    assert "Traceback" not in stale.output and _requests(store) == []
    sent = kefu.invoke(cli, ["send", str(customer), "在的", "--request-id", "cli-1", "--expect-epoch", "2"])
    assert sent.exit_code == 0, sent.output
    assert _requests(store) == ["cli-1"] and [r.text for r in platform.received("shop")] == ["在的"]


def test_the_console_form_carries_the_epoch_its_page_showed(settings, store, shop, transport, platform):
    from starlette.testclient import TestClient

    from worker.console import create_app
    from worker.context import WorkerRuntime

    customer = _buyer(store, transport, platform)
    add_operator(store, "alice", Role.OPERATOR, "operator-pass-1")
    with TestClient(create_app(WorkerRuntime(settings))) as client:
        token = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text)[1]
        client.post("/login", data={"csrf": token, "name": "alice", "password": "operator-pass-1"})

        def form() -> dict[str, str]:
            page = client.get(f"/c/{customer}").text
            send_form = page.split('id="send-form"')[1].split("</form>")[0]
            return dict(re.findall(r'name="(csrf|request_id|expected_epoch)" value="([^"]*)"', send_form))

        shown = form()
        assert shown["expected_epoch"] == "0"
        pause_handling(store, customer, "handoff", handoff=True)  # while the operator was typing
        refused = client.post(f"/c/{customer}/send", data={**shown, "text": "在的"}, follow_redirects=False)
        assert refused.status_code == 400 and "KEFU_HANDLING_EPOCH_CHANGED" in refused.text
        assert _requests(store) == []
        again = form()
        assert again["expected_epoch"] == "1"
        sent = client.post(f"/c/{customer}/send", data={**again, "text": "在的"}, follow_redirects=False)
        assert sent.status_code == 303, sent.text
        bad = client.post(f"/c/{customer}/send", data={**form(), "expected_epoch": "x", "text": "在的"})
        assert bad.status_code == 400 and "KEFU_INVALID_INPUT" in bad.text
    assert _requests(store) == [again["request_id"]]
    assert [r.text for r in platform.received("shop")] == ["在的"]
