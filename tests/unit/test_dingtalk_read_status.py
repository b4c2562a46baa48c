"""DingTalk read status is asked once per sent 1:1 message (SPEC 3.9; issue 42 item 6): the
pipeline's steps with the real DingTalk transport against the local fake DingTalk over real
HTTP, a real delivery store. The fake's record of read-status queries is the ground truth:
several rounds of checks, a worker that dies mid-query (its task redelivered), a restart of
the store and overlapping rounds each leave exactly one query per message."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from config import DingTalkSettings
from runtime import pipeline
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.routes import RouteSpec, create_route
from runtime.inbound.ingest import ingest_page
from runtime.outbox.manual import ManualSend, send_manual
from runtime.store import DeliveryStore
from runtime.store.clock import clock_at, now_ms
from tests.fakes.dingtalk import FakeDingTalk, sender_id_of
from tests.local_services import Local
from transports.dingtalk import DingTalkCredentials
from transports.dingtalk.robot import parse_robot_message, robot_page
from transports.dingtalk.transport import DingTalkTransport

MINUTE_MS = 60_000


class WorkerDied(BaseException):
    """A worker killed right after DingTalk answered: nothing after the query ran."""


class DyingTransport(DingTalkTransport):
    def read_by(self, account_id: str, platform_message_id: str) -> dict[str, int]:
        super().read_by(account_id, platform_message_id)  # DingTalk was asked, and answered
        raise WorkerDied


@dataclass
class DingServices(Local):
    dingtalk: DingTalkTransport | None = None

    def transport_of(self, account_id: str) -> DingTalkTransport:  # type: ignore[override]
        assert self.dingtalk is not None
        return self.dingtalk


@pytest.fixture
def ding(store, fake_dingtalk: FakeDingTalk) -> str:
    create_account(store, AccountSpec(id="ding", platform="dingtalk", identity=fake_dingtalk.robot_code))
    create_route(store, RouteSpec(id="ding-direct", account_id="ding", conversation_type="direct"), op_id="op-dd")
    return "ding"


def dingtalk(fake: FakeDingTalk, credentials: DingTalkCredentials, kind: type[DingTalkTransport] = DingTalkTransport):
    settings = DingTalkSettings(openapi_url=fake.url, oapi_url=fake.url, timeout_s=5, read_status_interval_s=60)
    return kind(settings, lambda _: credentials)


def services_for(settings, store, transport: DingTalkTransport) -> DingServices:
    return DingServices(settings, store, dingtalk=transport)


def sent_to(services: DingServices, fake: FakeDingTalk, staff: str) -> str:
    """A buyer's message in, a manual reply out through batchSend; the send's processQueryKey."""
    data = {
        "conversationId": f"cid-{staff}",
        "conversationType": "1",
        "msgId": f"msg-{staff}",
        "msgtype": "text",
        "text": {"content": "在吗"},
        "createAt": int(time.time() * 1000),
        "senderStaffId": staff,
        "senderId": sender_id_of(staff),
        "senderNick": staff,
        "robotCode": fake.robot_code,
    }
    [customer] = ingest_page(services.store, robot_page("ding", parse_robot_message(data))).customer_ids
    send_manual(services.store, ManualSend(request_id=f"r-{staff}", customer_id=customer, text="您好"))
    assert pipeline.deliver(services, f"r-{staff}").outcome == "sent"
    [key] = [s.process_query_key for s in fake.sends if s.user_ids == [staff]]
    return key


def rounds(services: DingServices, start_ms: int, n: int) -> None:
    """`n` beat rounds of read checks, ten minutes apart, from `start_ms`."""
    for k in range(n):
        with clock_at(start_ms + k * 10 * MINUTE_MS):
            pipeline.check_reads(services)


def test_several_rounds_of_checks_ask_once_per_message_and_a_read_is_stored_once(
    settings, store, ding, fake_dingtalk, credentials
):
    services = services_for(settings, store, dingtalk(fake_dingtalk, credentials))
    fake_dingtalk.prompt_readers = {"staff-r"}
    read_key, unread_key = sent_to(services, fake_dingtalk, "staff-r"), sent_to(services, fake_dingtalk, "staff-n")
    with clock_at(now_ms() + 30_000):  # not due yet (a minute after the send)
        pipeline.check_reads(services)
    assert fake_dingtalk.read_queries == []
    rounds(services, now_ms() + 2 * MINUTE_MS, 6)
    assert sorted(fake_dingtalk.read_queries) == sorted([read_key, unread_key])  # once each, not three times
    fake_dingtalk.mark_read(unread_key, "staff-n")  # read later: kefu does not poll for it
    rounds(services, now_ms() + 3 * 60 * MINUTE_MS, 3)
    assert sorted(fake_dingtalk.read_queries) == sorted([read_key, unread_key])
    with store.read() as conn:
        reads = conn.execute("SELECT platform_message_id, reader_id FROM buyer_read").all()
    assert reads == [(read_key, "staff-r")]


def test_a_worker_dying_mid_query_and_its_redelivered_task_never_ask_again(
    settings, store, ding, fake_dingtalk, credentials
):
    dying = services_for(settings, store, dingtalk(fake_dingtalk, credentials, DyingTransport))
    key = sent_to(dying, fake_dingtalk, "staff-d")
    with clock_at(now_ms() + 2 * MINUTE_MS), pytest.raises(WorkerDied):
        pipeline.check_reads(dying)
    assert fake_dingtalk.read_queries == [key]
    redelivered = services_for(settings, store, dingtalk(fake_dingtalk, credentials))
    rounds(redelivered, now_ms() + 2 * MINUTE_MS, 4)  # the same task again, then beat's next rounds
    assert fake_dingtalk.read_queries == [key]


def test_a_restarted_worker_on_the_same_store_does_not_ask_again(settings, store, ding, fake_dingtalk, credentials):
    services = services_for(settings, store, dingtalk(fake_dingtalk, credentials))
    key = sent_to(services, fake_dingtalk, "staff-s")
    rounds(services, now_ms() + 2 * MINUTE_MS, 1)
    assert fake_dingtalk.read_queries == [key]
    store.close()
    reopened = DeliveryStore(settings.delivery_path, settings.delivery)  # a new process on the shard's files
    try:
        restarted = services_for(settings, reopened, dingtalk(fake_dingtalk, credentials))
        rounds(restarted, now_ms() + 2 * MINUTE_MS, 4)
    finally:
        reopened.close()
    assert fake_dingtalk.read_queries == [key]


def test_overlapping_rounds_ask_each_message_once(settings, store, ding, fake_dingtalk, credentials):
    services = services_for(settings, store, dingtalk(fake_dingtalk, credentials))
    keys = [sent_to(services, fake_dingtalk, f"staff-{n}") for n in range(8)]
    at = now_ms() + 2 * MINUTE_MS
    with clock_at(at):
        threads = [threading.Thread(target=pipeline.check_reads, args=(services,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert sorted(fake_dingtalk.read_queries) == sorted(keys)


def test_a_failed_query_is_not_retried(settings, store, ding, fake_dingtalk, credentials):
    services = services_for(settings, store, dingtalk(fake_dingtalk, credentials))
    key = sent_to(services, fake_dingtalk, "staff-f")
    fake_dingtalk.sends.clear()  # DingTalk no longer knows the key: it answers 400
    rounds(services, now_ms() + 2 * MINUTE_MS, 4)
    assert fake_dingtalk.read_queries == [key]
