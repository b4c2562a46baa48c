"""Retention: what the policy no longer keeps is pruned, nothing in flight ever is, and with no
policy (the default) nothing at all."""

from __future__ import annotations

import os
from zoneinfo import ZoneInfo

from config import RetentionSettings
from runtime.admission.batches import evaluate
from runtime.agent.rotation import rotate_by_operator
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.session_log import SessionLog
from runtime.agent.sessions import damaged_folder, list_sessions, session_path
from runtime.agent.turn import run_turn
from runtime.customers.retention import DAY_MS, Pruned, prune
from runtime.customers.transcript import transcript
from runtime.inbound.ingest import ingest_page
from runtime.outbox.manual import ManualSend, send_manual
from runtime.outbox.requests import begin_attempt, record_sent
from runtime.ports import SendReceipt
from runtime.store import now_ms

ZONE = ZoneInfo("Asia/Shanghai")
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def say(store, transport, platform, buyer, text):
    return ingest_page(
        store, transport.page_of("shop", [platform.buyer_says("shop", buyer, buyer, text)])
    ).customer_ids[0]


def count(store, table, where="1"):
    with store.read() as conn:
        return conn.execute(f"SELECT count(*) FROM {table} WHERE {where}").scalar()


def test_old_settled_records_go_and_nothing_in_flight_does(store, settings, shop, transport, platform):
    answered = say(store, transport, platform, "b1", "什么时候发货？")
    evaluate(store, answered, 1000)
    sent: list[str] = []
    run_turn(store, RulesProvider(load_knowledge(None)), answered, settings.sessions_dir, ZONE, settings.agent,
             on_registered=sent.append)  # fmt: skip
    for request_id in sent:
        grant = begin_attempt(store, request_id, "w", 60)
        record_sent(store, request_id, grant.attempt_no, SendReceipt(platform_message_id=f"pm-{request_id}"))
    send_manual(store, ManualSend(request_id="pic", customer_id=answered, file_name="a.png", file_data=PNG))
    waiting = say(store, transport, platform, "b2", "在吗")  # input not admitted yet: in flight
    kept = damaged_folder(settings.sessions_dir) / f"s{waiting}-1.jsonl.zst"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"damaged")
    os.utime(kept, (1, 1))

    assert prune(store, settings.sessions_dir, RetentionSettings(), now_ms() + 400 * DAY_MS) == Pruned()
    policy = RetentionSettings(delivery_days=30, media_days=30, sessions_days=30)
    pruned = prune(store, settings.sessions_dir, policy, now_ms() + 31 * DAY_MS)
    assert (pruned.messages, pruned.batches, pruned.replies, pruned.sessions) == (1, 1, len(sent), 1)
    assert pruned.media == 0  # the image's send is still pending: its copy stays
    assert count(store, "inbound_message", f"customer_id = {waiting}") == 1  # pending input stays
    assert count(store, "outbox_request", "request_id = 'pic'") == 1 and count(store, "media") == 1
    assert count(store, "customer") == 2 and not kept.exists()
    assert [line.request_id for line in transcript(store, answered).lines] == ["pic"]  # what is left still reads
    assert prune(store, settings.sessions_dir, policy, now_ms() + 31 * DAY_MS) == Pruned()  # idempotent


def test_a_sent_image_reply_and_then_its_copy_are_pruned_without_breaking_a_reference(
    store, settings, shop, transport, platform
):
    customer = say(store, transport, platform, "b1", "尺码表有吗")
    send_manual(store, ManualSend(request_id="pic", customer_id=customer, file_name="a.png", file_data=PNG))
    grant = begin_attempt(store, "pic", "w", 60)
    record_sent(store, "pic", grant.attempt_no, SendReceipt(platform_message_id="pm-pic"))
    media_only = RetentionSettings(media_days=30)
    assert (
        prune(store, settings.sessions_dir, media_only, now_ms() + 31 * DAY_MS).media == 0
    )  # its reply still refers to it
    everything = RetentionSettings(delivery_days=30, media_days=30)
    pruned = prune(store, settings.sessions_dir, everything, now_ms() + 31 * DAY_MS)
    assert (pruned.replies, pruned.media) == (1, 1) and count(store, "media") == 0


def test_an_ended_sessions_log_is_pruned_and_the_current_one_never(store, settings, shop, transport, platform):
    customer = say(store, transport, platform, "b1", "什么时候发货？")
    evaluate(store, customer, 1000)
    run_turn(store, RulesProvider(load_knowledge(None)), customer, settings.sessions_dir, ZONE, settings.agent)
    ended = session_path(settings.sessions_dir, f"s{customer}-1")
    rotate_by_operator(store, customer, settings.sessions_dir, None, settings.agent)
    say(store, transport, platform, "b1", "发什么快递？")
    evaluate(store, customer, 1000)
    run_turn(store, RulesProvider(load_knowledge(None)), customer, settings.sessions_dir, ZONE, settings.agent)
    current = session_path(settings.sessions_dir, f"s{customer}-2")
    for path in (ended, current):
        os.utime(path, (1, 1))
    policy = RetentionSettings(sessions_days=30)
    assert prune(store, settings.sessions_dir, policy, now_ms() + 31 * DAY_MS).sessions == 1
    assert not ended.exists() and current.exists()
    assert [(row.id, row.events) for row in list_sessions(store, settings.sessions_dir, customer)] == [
        (f"s{customer}-1", 0),  # its header stays: it existed, its log is gone
        (f"s{customer}-2", len(SessionLog(current).load())),
    ]


def test_old_memory_images_are_pruned_and_newer_ones_kept(store, settings, tmp_path):
    folder = settings.memory_images_dir / "customer-7"
    folder.mkdir(parents=True)
    old, new = folder / "a.png", folder / "b.png"
    for path in (old, new):
        path.write_bytes(PNG)
    os.utime(old, (1, 1))
    policy = RetentionSettings(memory_images_days=30)
    assert prune(store, settings.sessions_dir, policy).memory_images == 0  # no folder given: none
    pruned = prune(store, settings.sessions_dir, policy, memory_images_dir=settings.memory_images_dir)
    assert pruned.memory_images == 1 and not old.exists() and new.exists()
