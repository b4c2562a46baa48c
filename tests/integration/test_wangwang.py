"""Wangwang end to end: a real worker started with `--listen` on Redis, long-polling the fake
bridge over loopback with signed requests. The bridge's record of sends is the ground truth."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runtime.accounts.credentials import save_credentials
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.routes import RouteSpec, create_route
from runtime.inbound.media import MediaBody, media_body
from tests.fakes.wangwang import FakeWangwangBridge
from tests.integration.helpers import wait_for, wait_runs, worker_env
from tests.unit.test_inbound_images import png
from transports.wangwang import WangwangCredentials
from worker.celery_app import make_app
from worker.cli import cli
from worker.process import WorkerProcess

pytestmark = pytest.mark.parametrize("broker_url", ["redis"], indirect=True)

ACCOUNT = "ww"
BUYERS = {"cntaobao买家一": "什么时候发货", "cntaobao买家二": "可以开发票吗", "cntaobao买家三": "有优惠券吗"}


@pytest.fixture
def worker(settings, store, fake_wangwang: FakeWangwangBridge) -> Iterator[WorkerProcess]:
    create_account(store, AccountSpec(id=ACCOUNT, platform="wangwang", identity=fake_wangwang.seller_id))
    credentials = WangwangCredentials(
        gateway_url=fake_wangwang.url,
        app_key=fake_wangwang.app_key,
        app_secret=fake_wangwang.app_secret,
        seller_id=fake_wangwang.seller_id,
        sign_method="md5",
    )
    with store.write() as conn:
        save_credentials(conn, ACCOUNT, credentials.storable())
    create_route(store, RouteSpec(id="ww-direct", account_id=ACCOUNT, conversation_type="direct"), op_id="op-ww")
    env = worker_env(settings, KEFU_WANGWANG__TIMEOUT_S="1")
    process = WorkerProcess(env, settings.data_dir / "worker.log", listen=True).start()
    process.wait_ready(make_app(settings))
    yield process
    process.stop()


def test_buyers_are_answered_once_echoes_are_ours_and_reads_reach_the_store(worker, store, fake_wangwang):
    for buyer, question in BUYERS.items():
        fake_wangwang.buyer_says(buyer, question)
    wait_for(lambda: all(fake_wangwang.replies_to(b) for b in BUYERS), 40, "a reply to every buyer")

    def echoes() -> int:
        with store.read() as conn:
            return conn.execute("SELECT count(*) FROM inbound_message WHERE sender_role = 'ai'").scalar_one()

    wait_for(lambda: echoes() >= len(BUYERS), 30, "the echoes of the replies to come back through the listener")
    wait_runs(worker.log_path)  # and reconciler passes after them: none may be answered
    assert {b: len(fake_wangwang.replies_to(b)) for b in BUYERS} == dict.fromkeys(BUYERS, 1)
    assert {s.conversation_id for s in fake_wangwang.sends} == {
        f"conv-{b}" for b in BUYERS
    }  # to the buyer, never the conversation id
    with store.read() as conn:
        roles = dict(conn.execute("SELECT sender_role, count(*) FROM inbound_message GROUP BY 1").all())
        states = dict(conn.execute("SELECT state, count(*) FROM outbox_request GROUP BY 1").all())
    assert roles == {"external": 3, "ai": 3} and states == {"sent": 3}
    assert fake_wangwang.confirms  # committed pages were confirmed to the bridge

    first = fake_wangwang.replies_to("cntaobao买家一")[0]
    fake_wangwang.buyer_reads(first.message_id)

    def stored() -> bool:
        with store.read() as conn:
            return conn.execute("SELECT count(*) FROM buyer_read").scalar_one() == 1

    wait_for(stored, 20, "the buyer's read event to be stored")


def test_a_lost_answer_is_settled_by_the_echo_and_never_resent(worker, store, fake_wangwang):
    fake_wangwang.stall_sends, fake_wangwang.stall_s = 1, 2.5  # sent, but the answer is late
    fake_wangwang.buyer_says("cntaobao买家四", "可以退货吗")
    wait_for(lambda: fake_wangwang.replies_to("cntaobao买家四"), 30, "the send to reach the bridge")

    def settled() -> bool:
        with store.read() as conn:
            return conn.execute("SELECT state FROM outbox_request").scalar_one() == "sent"

    wait_for(settled, 30, "the echo (or a receipt query) to settle the send")
    wait_runs(worker.log_path)  # reconciler passes after it: never a second send
    assert len(fake_wangwang.sends) == 1


# A buyer's picture reaches the store: paged as its media id, fetched through `media.get` and the
# bridge's download URL; an 11 MiB picture is refused on its declared size, never downloaded.
PICTURE = png(4)
BUYER = "cntaobao买家图"


def images(store) -> list[MediaBody]:
    with store.read() as conn:
        rows = conn.execute("SELECT body FROM inbound_message WHERE content_type = 'image' ORDER BY id")
        return [media_body(body) for (body,) in rows]


def test_a_picture_is_stored_and_one_over_the_limit_refused_unread(worker, store, fake_wangwang, kefu):
    small = fake_wangwang.buyer_sends_image(BUYER, PICTURE)
    wait_for(
        lambda: [b.state for b in images(store)] == ["stored"], 30, "the picture to be stored", lambda: images(store)
    )
    [stored] = images(store)
    assert (stored.mime, stored.size, stored.ref) == ("image/png", len(PICTURE), small)
    with store.read() as conn:
        [customer] = conn.execute("SELECT DISTINCT customer_id FROM inbound_message").scalars()
    history = kefu.invoke(cli, ["history", str(customer)])
    assert history.exit_code == 0 and f"[image image/png, {len(PICTURE)} B]" in history.stdout

    big = fake_wangwang.buyer_sends_image(BUYER, PICTURE + b"\x00" * (11 * 1024 * 1024))
    wait_for(lambda: len(images(store)) == 2 and images(store)[1].state != "pending", 30, "the big picture's outcome")
    refused = images(store)[1]
    assert (refused.state, refused.code, refused.ref) == ("refused", "KEFU_MEDIA_TOO_LARGE", big)
    assert refused.size == len(PICTURE) + 11 * 1024 * 1024
    assert fake_wangwang.downloads == [small]  # asked about, never downloaded
    assert big in fake_wangwang.media_gets
    history = kefu.invoke(cli, ["history", str(customer)])
    assert "[image refused: KEFU_MEDIA_TOO_LARGE]" in history.stdout
