"""A lease whose holder process died is taken over at once where its host can see it gone
(runtime.store.holders, runtime.store.leases), and its stranded turn runs again without waiting out the
reconciler's grace (runtime.pipeline.rescue). A live holder, another host's or one of an
unknown form, keeps its lease until it expires."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from celery import current_app
from celery.signals import worker_process_init

from config import load_settings
from runtime import pipeline
from runtime.outbox.manual import ManualSend, send_manual
from runtime.outbox.requests import AttemptGrant, begin_attempt, load_request
from runtime.pipeline import Attempt, RunTurn, Settle, Step
from runtime.ports import NeverReceived, SendReceipt
from runtime.store import DeliveryStore, holders, leases, now_ms
from runtime.store.states import OutboxState
from tests.unit.test_pipeline import ingested, services, turn  # noqa: F401  (the fixture)
from worker.celery_app import make_app
from worker.context import WorkerRuntime, runtime_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dead_owner() -> str:
    """The holder name of a real process of this host that has exited."""
    done = subprocess.run(
        [sys.executable, "-c", "from runtime.store.holders import new_owner; print(new_owner())"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return done.stdout.strip()


def test_a_holder_is_gone_only_when_this_host_can_see_its_process_is(dead_owner):
    assert holders.parse(dead_owner) is not None and holders.gone(dead_owner)
    assert not holders.gone(holders.new_owner())  # this very process
    host, pid, nonce, boot, namespace, started = dead_owner.split(":")
    assert not holders.gone(":".join(("other-host", pid, nonce, boot, namespace, started)))
    assert not holders.gone(":".join((host, pid, nonce, "0" * 12, namespace, started)))  # another boot
    assert not holders.gone(":".join((host, pid, nonce, boot, "1", started)))  # another container
    assert not holders.gone(f"{host}:{pid}:{nonce}")  # an older kefu's name: never concluded gone
    parent = holders.this_process()
    alive = ":".join((parent.host, str(os.getppid()), "x", parent.boot, parent.pid_namespace, "1"))
    assert holders.gone(alive)  # the pid lives, but with another start time: reused, not the holder


def test_a_live_process_whose_start_time_cannot_be_read_is_not_gone(monkeypatch):
    parent = holders.this_process()
    owner = ":".join((parent.host, str(os.getppid()), "x", parent.boot, parent.pid_namespace, "1"))
    monkeypatch.setattr(holders, "start_ticks", lambda pid: None)  # /proc mounted hidepid, another user's
    assert not holders.gone(owner)


def test_a_grant_takes_a_dead_holders_lease_at_once_with_a_new_token(store, dead_owner):
    dead = leases.grant(store, "customer:7", dead_owner, ttl_s=600)
    live = leases.grant(store, "customer:8", holders.new_owner(), ttl_s=600)
    assert dead is not None and live is not None
    taken = leases.grant(store, "customer:7", holders.new_owner(), ttl_s=600)
    assert taken is not None and taken.token == dead.token + 1
    assert leases.grant(store, "customer:8", holders.new_owner(), ttl_s=600) is None  # alive: still busy


def test_a_turn_whose_holder_died_runs_at_once(services, dead_owner):  # noqa: F811
    customer_id = ingested(services)
    pipeline.admit(services, customer_id)
    assert leases.grant(services.store, f"customer:{customer_id}", dead_owner, ttl_s=600) is not None
    step, emitted = turn(services, customer_id)
    assert step.outcome == "complete" and len(emitted) == 1


def test_rescue_lapses_dead_holders_and_runs_their_stranded_turns_only(services, dead_owner):  # noqa: F811
    dead_customer, live_customer, idle_customer = (ingested(services, n, buyer=f"b{n}") for n in (1, 2, 3))
    for customer_id in (dead_customer, live_customer):
        pipeline.admit(services, customer_id)
    store = services.store
    assert leases.grant(store, f"customer:{dead_customer}", dead_owner, ttl_s=600) is not None
    assert leases.grant(store, f"customer:{idle_customer}", dead_owner, ttl_s=600) is not None  # no open batch
    with leases.held(store, f"customer:{live_customer}", 600) as fence:
        assert fence is not None
        step = pipeline.rescue(services)
        assert step.follow_ups == (RunTurn(dead_customer),)
        assert step.outcome.startswith("2 lease(s) of gone holders, 1 stranded turn(s)")
        assert pipeline.rescue(services).follow_ups == (RunTurn(dead_customer),)  # until a turn runs it
        assert turn(services, dead_customer)[0].outcome == "complete"
        assert pipeline.rescue(services).outcome.startswith("0 lease(s) of gone holders, 0 stranded turn(s)")


def test_an_expired_lease_strands_its_open_batch_but_a_released_one_does_not(services):  # noqa: F811
    customer_id = ingested(services)
    pipeline.admit(services, customer_id)
    store = services.store
    with store.write() as conn:  # a holder on another host, its lease expired unrenewed
        conn.execute(
            "INSERT INTO lease (name, owner, expires_at, token) VALUES (?, 'elsewhere:1:x', ?, 3)",
            (f"customer:{customer_id}", now_ms() - 1),
        )
    assert pipeline.rescue(services).follow_ups == (RunTurn(customer_id),)
    with store.write() as conn:  # given back: whoever gave it back queued what follows
        conn.execute("UPDATE lease SET expires_at = 0")
    assert pipeline.rescue(services).follow_ups == ()


def _send_begun_by(services, owner: str) -> str:  # noqa: F811
    customer_id = ingested(services)
    send_manual(services.store, ManualSend(request_id="op-1", customer_id=customer_id, text="您好"))
    assert isinstance(begin_attempt(services.store, "op-1", owner, lease_s=600), AttemptGrant)
    return "op-1"


def test_a_send_whose_process_died_is_asked_about_at_once_and_never_sent_blindly(services, dead_owner):  # noqa: F811
    request_id = _send_begun_by(services, dead_owner)
    assert pipeline.rescue(services).follow_ups == (Attempt(request_id),)
    assert pipeline.deliver(services, request_id) == Step("result-unknown", (Settle(request_id),))
    assert services.transport.sent == []
    services.transport.lookup = lambda rid: SendReceipt(platform_message_id="pm-1")  # it had arrived
    assert pipeline.settle(services, request_id) == Step("settled")
    with services.store.read() as conn:
        assert load_request(conn, request_id).state == OutboxState.SENT


def test_a_dead_senders_send_the_platform_never_saw_goes_again_only_after_the_attempt_lease(
    services,  # noqa: F811
    dead_owner,
):
    request_id = _send_begun_by(services, dead_owner)
    pipeline.deliver(services, request_id)
    services.transport.lookup = lambda rid: NeverReceived()
    assert pipeline.settle(services, request_id) == Step("not-unknown")  # the kernel may still be sending it
    with services.store.write() as conn:  # older than the attempt lease now
        conn.execute("UPDATE outbox_attempt SET started_at = started_at - 3600000")
    assert pipeline.settle(services, request_id) == Step("never-received", (Attempt(request_id),))
    assert pipeline.deliver(services, request_id).outcome == "sent"


def test_a_live_senders_attempt_stays_in_progress(services):  # noqa: F811
    request_id = _send_begun_by(services, holders.new_owner())
    assert pipeline.rescue(services).follow_ups == ()
    assert pipeline.deliver(services, request_id) == Step("in-progress")


def test_a_starting_worker_lapses_its_hosts_dead_holders_before_it_forks(tmp_path, dead_owner):
    """The rescue task its start sends may reach a worker on another host, which cannot see
    this host's processes: the lapse is the starting worker's own, in its startup check."""
    settings = load_settings(data_dir=tmp_path)
    store = DeliveryStore(settings.delivery_path, settings.delivery)
    assert leases.grant(store, "customer:7", dead_owner, ttl_s=600) is not None
    assert leases.grant(store, "customer:8", holders.new_owner(), ttl_s=600) is not None  # alive
    WorkerRuntime(settings).check()
    with store.read() as conn:
        expiry = dict(conn.execute("SELECT name, expires_at FROM lease").all())
    assert expiry["customer:7"] == 1 and expiry["customer:8"] > now_ms()  # lapsed; kept
    store.close()


def test_a_pool_process_that_starts_lapses_the_leases_of_the_one_it_replaces(tmp_path, dead_owner):
    """Celery replaces a pool process that died; the task it was running is requeued and may
    reach a worker on another host, which cannot see the process gone."""
    settings = load_settings(data_dir=tmp_path)
    store = DeliveryStore(settings.delivery_path, settings.delivery)
    assert leases.grant(store, "customer:7", dead_owner, ttl_s=600) is not None
    app, previous = make_app(settings), current_app._get_current_object()
    app.set_current()  # as billiard's process initializer does before it sends the signal
    try:
        worker_process_init.send(sender=None)
    finally:
        previous.set_current()
    with store.read() as conn:
        assert conn.execute("SELECT expires_at FROM lease").scalar_one() == 1
    runtime_for(app).store.close()
    store.close()
