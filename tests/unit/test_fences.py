"""Fenced writer leases (SPEC 3.7): a token that grows with every grant, renewal while a turn
runs, and a holder that lost its lease writes nothing to the session log or the outbox."""

from __future__ import annotations

import time
from contextlib import ExitStack

import pytest

from runtime.admission.batches import evaluate
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.session_log import SessionLog
from runtime.agent.sessions import session_path
from runtime.agent.turn import run_turn
from runtime.ports import AssistantReply
from runtime.store import leases
from runtime.store.clock import clock_at, now_ms
from runtime.store.leases import LeaseLost, before_file_write, fenced
from tests.unit.test_agent_turn import say


def test_every_new_grant_has_a_higher_token_and_a_renewal_keeps_it(store):
    first = leases.grant(store, "customer:1", "w1", ttl_s=0.2)
    assert first is not None and leases.grant(store, "customer:1", "w2", ttl_s=0.2) is None
    assert leases.grant(store, "customer:1", "w1", ttl_s=0.2).token == first.token  # renewed
    leases.release(store, "customer:1", "w1")
    second = leases.grant(store, "customer:1", "w2", ttl_s=0.2)
    with clock_at(now_ms() + 250):
        third = leases.grant(store, "customer:1", "w3", ttl_s=0.2)  # w2 lapsed
    assert first.token < second.token < third.token


def test_a_holder_whose_lease_passed_on_writes_nothing(store, tmp_path):
    stale = leases.grant(store, "customer:1", "w1", ttl_s=0.05)
    with clock_at(now_ms() + 100):  # w1's lease lapsed
        assert leases.grant(store, "customer:1", "w2", ttl_s=60) is not None
    with pytest.raises(LeaseLost) as lost:
        with fenced(store, stale) as conn:
            conn.execute("UPDATE customer SET title = 'written by a stale holder'")
    assert lost.value.code == "KEFU_LEASE_LOST"
    log = SessionLog(tmp_path / "s.jsonl.zst", lambda: before_file_write(stale))
    log.append("turn/start", turn="t0", batch_id="b1", kind="batch")
    with pytest.raises(LeaseLost):
        log.flush()
    assert not log.path.exists()


def test_a_held_lease_is_renewed_past_its_duration_while_its_holder_works(store):
    with leases.held(store, "customer:1", ttl_s=0.3) as fence:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # three durations: only renewal keeps it
            assert leases.grant(store, "customer:1", "other", ttl_s=1) is None
            time.sleep(0.05)
        with fenced(store, fence):
            pass
    assert leases.grant(store, "customer:1", "other", ttl_s=1) is not None  # released at the end


class StalledModel(RulesProvider):
    """A model call during which the worker stalls past its lease (a paused VM, a GC pause:
    no renewal runs) and another worker takes the customer over."""

    def __init__(self, store, customer_id: int, stalled: ExitStack) -> None:
        super().__init__(load_knowledge(None))
        self.store, self.customer_id, self.stalled = store, customer_id, stalled

    def complete(self, messages, tools) -> AssistantReply:
        # The lease (60 s) lapses while the call stalls, for the rest of the turn ...
        self.stalled.enter_context(clock_at(now_ms() + 61_000))
        assert leases.grant(self.store, f"customer:{self.customer_id}", "worker-2", ttl_s=60) is not None
        return super().complete(messages, tools)  # ... and the stale holder's model still answers


def test_a_turn_whose_lease_passed_on_mid_call_sends_nothing_and_logs_nothing_more(
    store, settings, shop, transport, platform
):
    customer = say(store, transport, platform, "b1", "什么时候发货？")
    evaluate(store, customer, 1000)
    fence = leases.grant(store, f"customer:{customer}", "worker-1", ttl_s=60)
    registered: list[str] = []
    with ExitStack() as stalled, pytest.raises(LeaseLost):
        run_turn(
            store,
            StalledModel(store, customer, stalled),
            customer,
            settings.sessions_dir,
            settings.zone,
            settings.agent,
            on_registered=registered.append,
            fence=fence,
        )
    assert registered == []
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM outbox_request").scalar_one() == 0
        # The batch commit rode on the refused write: the new holder finds the batch claimed ...
        assert conn.execute("SELECT state FROM admission_batch").scalar_one() == "claimed"
    # ... and nothing of the stale holder's turn in the log (its first flush was refused): it runs the turn whole.
    assert SessionLog(session_path(settings.sessions_dir, f"s{customer}-1")).load() == []


def test_a_lease_let_go_in_its_holders_last_write_is_free_at_once_and_not_released_twice(store):
    statements: list[str] = []
    with leases.held(store, "customer:1", ttl_s=60) as fence:
        assert fence is not None
        with store.write() as conn:
            fence.check_and_release(conn)
        store.trace(statements.append)
    store.trace(None)
    assert not [s for s in statements if s.startswith("UPDATE lease")]  # no second release
    assert leases.grant(store, "customer:1", "next", ttl_s=60) is not None  # free now, not in 60 s


def test_a_last_write_that_failed_after_letting_go_still_releases_the_lease(store):
    with pytest.raises(RuntimeError):
        with leases.held(store, "customer:1", ttl_s=60) as fence:
            assert fence is not None
            with store.write() as conn:
                fence.check_and_release(conn)
                raise RuntimeError("the rest of the write failed: rolled back, release with it")
    assert leases.grant(store, "customer:1", "next", ttl_s=60) is not None


def test_a_claimed_lease_is_taken_by_the_first_write_and_a_busy_one_writes_nothing(store):
    other = leases.grant(store, "customer:1", "other", ttl_s=60)
    with pytest.raises(leases.LeaseBusy):
        with leases.claimed(store, "customer:1", ttl_s=60) as fence:
            with fenced(store, fence) as conn:
                conn.execute("UPDATE customer SET title = 'written while busy'")
    assert leases.grant(store, "customer:1", "other", ttl_s=60).token == other.token  # still the other's
    leases.release(store, "customer:1", "other")
    with leases.claimed(store, "customer:1", ttl_s=60) as fence:
        assert fence.token == 0  # nothing taken before the first write
        with fenced(store, fence):
            pass
        assert fence.token > other.token and leases.grant(store, "customer:1", "third", ttl_s=60) is None
    assert leases.grant(store, "customer:1", "third", ttl_s=60) is not None  # released at the end


def test_a_renewal_that_did_not_commit_does_not_count_for_a_file_write(store):
    fence = leases.grant(store, "customer:1", "w1", ttl_s=60)
    fence.held_until = leases.now_ms() + 1000  # as if the last renewal that committed was long ago
    with pytest.raises(RuntimeError):
        with fenced(store, fence):  # renews in its transaction ...
            raise RuntimeError("... which then rolls back")
    with pytest.raises(LeaseLost):  # the stored expiry is the old one: too close to write a file
        with before_file_write(fence):
            pass


class TakenOverDuringCall(RulesProvider):
    """Another worker is granted the customer during the model call (its clock ran ahead: the
    lease had lapsed for it), while this worker's own clock still says it holds the lease."""

    def __init__(self, store, customer_id: int) -> None:
        super().__init__(load_knowledge(None))
        self.store, self.customer_id = store, customer_id

    def complete(self, messages, tools) -> AssistantReply:
        with clock_at(now_ms() + 61_000):
            assert leases.grant(self.store, f"customer:{self.customer_id}", "worker-2", ttl_s=60) is not None
        return super().complete(messages, tools)  # no FAQ answer: the rules agent hands off


def test_a_turn_that_lost_its_lease_hands_nothing_off(store, settings, shop, transport, platform):
    """The handoff pauses the customer and revokes unsent replies: the new holder's, by then."""
    customer = say(store, transport, platform, "b1", "你们仓库在哪个城市？")
    evaluate(store, customer, 1000)
    fence = leases.grant(store, f"customer:{customer}", "worker-1", ttl_s=60)
    with pytest.raises(LeaseLost):
        run_turn(
            store,
            TakenOverDuringCall(store, customer),
            customer,
            settings.sessions_dir,
            settings.zone,
            settings.agent,
            fence=fence,
        )
    with store.read() as conn:
        assert conn.execute("SELECT handling_paused FROM customer WHERE id = :c", {"c": customer}).scalar_one() == 0
