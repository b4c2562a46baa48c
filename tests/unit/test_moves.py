"""A move's journal step by step (runtime.placement.moves), between two real shard stores on one local
coordination file, with a MockTransport for the platform: no broker, no worker."""

from __future__ import annotations

import pytest

from config import load_settings
from runtime import pipeline
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.routes import RouteSpec, create_route
from runtime.errors import KefuError
from runtime.pipeline import Attempt, Ingest
from runtime.placement import moves
from runtime.placement.directory import discarder, enter_accounts, rebuild_directory
from runtime.placement.moves import begin_move, begin_rollback, flip, load_move
from runtime.placement.shards import customer_id_base, local_placement
from runtime.store import DeliveryStore
from runtime.store.states import MoveStep, PlacementState
from tests.local_services import Local
from tests.unit.test_pipeline import page, turn
from worker.coordination import LocalCoordinator


def _shard(tmp_path, name: str) -> Local:
    settings = load_settings(data_dir=tmp_path / name, shard=name)
    store = DeliveryStore(settings.delivery_path, settings.delivery, customer_id_base=customer_id_base(name))
    return Local(settings, store)


@pytest.fixture
def shards(tmp_path):
    a, b = _shard(tmp_path, "a"), _shard(tmp_path, "b")
    create_account(a.store, AccountSpec(id="shop", platform="simulator", identity="seller-1"))
    create_route(a.store, RouteSpec(id="shop-direct", account_id="shop", conversation_type="direct"), "op-r")
    coordination = LocalCoordinator(tmp_path / "coordination.sqlite")
    assert enter_accounts(a.store, coordination, "a").elsewhere == []
    yield a, b, coordination
    a.store.close()
    b.store.close()


def _replied(services: Local, n: int) -> str:
    """A buyer line ingested and answered by a turn; the reply's request, not yet sent."""
    received = page(n)
    [admit] = pipeline.ingest(services, received.model_dump(mode="json")).follow_ups
    pipeline.admit(services, admit.customer_id)
    _, emitted = turn(services, admit.customer_id)
    [attempt] = [work for work in emitted if isinstance(work, Attempt)]
    return attempt.request_id


def _state(store: DeliveryStore, request_id: str) -> str | None:
    with store.read() as conn:
        row = conn.execute("SELECT state FROM outbox_request WHERE request_id = ?", (request_id,)).first()
    return None if row is None else row[0]


def test_a_move_drains_seals_imports_flips_releases_and_resumes(shards):
    a, b, coordination = shards
    sent = _replied(a, 1)
    pipeline.deliver(a, sent)
    waiting = _replied(a, 2)  # registered, not yet sent when the move begins
    record = begin_move(coordination, "m1", "shop", "b")
    assert moves.advance(b, coordination, "m1").outcome == "not this shard's step"

    draining = moves.advance(a, coordination, "m1")
    assert draining.outcome.startswith("draining") and load_move(coordination, "m1").step == MoveStep.STOPPING
    assert pipeline.deliver(a, waiting).outcome == "sent"  # what is on its way still goes out
    assert moves.advance(a, coordination, "m1").outcome.startswith("exported")
    assert load_move(coordination, "m1").step == MoveStep.EXPORTED
    late = page(3).model_dump(mode="json")
    assert pipeline.ingest(a, late).outcome == "held"  # paused: kept, not lost

    imported = moves.advance(b, coordination, "m1")  # the target flips the directory once it imported
    assert imported.outcome == "imported 1 customer(s); the directory now says b"
    record = load_move(coordination, "m1")
    assert record.step == MoveStep.FLIPPED and flip(coordination, record).step == MoveStep.FLIPPED  # idempotent
    record = load_move(coordination, "m1")
    assert coordination.placement("shop").shard == "b" and coordination.placement("shop").generation == 2
    with pytest.raises(KefuError) as refused:
        begin_rollback(coordination, record)
    assert refused.value.code == "KEFU_PLACEMENT_ALREADY_FLIPPED"

    released = moves.advance(a, coordination, "m1")
    assert [work.page["page_op_id"] for work in released.follow_ups if isinstance(work, Ingest)] == ["p3"]
    forwarded = pipeline.ingest(a, late)  # the source forwards it now
    [onward] = forwarded.follow_ups
    assert forwarded.outcome == "forwarded to b" and isinstance(onward, Ingest)
    assert (onward.shard, onward.page["page_op_id"]) == ("b", "p3")
    assert _state(a.store, sent) is None  # a keeps nothing of the account

    resumed = moves.advance(b, coordination, "m1")
    assert load_move(coordination, "m1").step == MoveStep.DONE
    assert _state(b.store, sent) == "sent" and _state(b.store, waiting) == "sent"
    assert pipeline.ingest(b, late).outcome == "ingested"
    assert resumed.outcome.startswith("resumed")


def test_nothing_is_sent_from_either_shard_while_the_account_is_handed_over(shards, monkeypatch):
    a, b, coordination = shards
    monkeypatch.setattr(moves, "DRAIN_S", 0.0)  # replies not sent by now are revoked, manual ones move
    revoked = _replied(a, 1)
    begin_move(coordination, "m1", "shop", "b")
    moves.advance(a, coordination, "m1")
    assert _state(a.store, revoked) == "revoked"
    assert load_move(coordination, "m1").step == MoveStep.EXPORTED
    moves.advance(b, coordination, "m1")
    with a.store.write() as conn:  # were a request still pending on both sides, neither sends it
        conn.execute("UPDATE outbox_request SET state = 'pending' WHERE request_id = ?", (revoked,))
    with b.store.write() as conn:
        conn.execute("UPDATE outbox_request SET state = 'pending' WHERE request_id = ?", (revoked,))
    assert pipeline.deliver(a, revoked).outcome == "moving"
    assert pipeline.deliver(b, revoked).outcome == "moving"
    assert a.transport.sent == [] and b.transport.sent == []


def test_a_move_rolled_back_before_the_flip_serves_the_account_where_it_was(shards):
    a, b, coordination = shards
    _replied(a, 1)
    begin_move(coordination, "m1", "shop", "b")
    moves.advance(a, coordination, "m1")  # draining: the reply is not sent yet
    with pytest.raises(KefuError) as mismatch:
        begin_move(coordination, "m1", "shop", "c")
    assert mismatch.value.code == "KEFU_PLACEMENT_OP_MISMATCH"
    begin_rollback(coordination, load_move(coordination, "m1"))  # from stopping: nothing reached b
    assert load_move(coordination, "m1").step == MoveStep.ROLLING_BACK_SOURCE
    assert moves.advance(b, coordination, "m1").outcome == "not this shard's step"
    assert moves.advance(a, coordination, "m1").outcome.startswith("rolled back")
    assert load_move(coordination, "m1").step == MoveStep.ROLLED_BACK
    assert coordination.placement("shop").model_dump() == {
        "account_id": "shop",
        "shard": "a",
        "generation": 1,
        "state": "active",
        "move": None,
    }
    assert pipeline.ingest(a, page(2).model_dump(mode="json")).outcome == "ingested"


# --- bounds, rollback by itself, beat driving ----------------------------------------------


def _dead_turn(services: Local, n: int) -> int:
    """A buyer line admitted and claimed by a turn that never finishes (its worker was killed)."""
    [admit] = pipeline.ingest(services, page(n).model_dump(mode="json")).follow_ups
    pipeline.admit(services, admit.customer_id)
    with services.store.write() as conn:
        conn.execute("UPDATE admission_batch SET state = 'claimed' WHERE customer_id = ?", (admit.customer_id,))
    return admit.customer_id


def _overdue(coordination: LocalCoordinator, op_id: str, by_s: float) -> None:
    """The move reached its step `by_s` ago (instead of waiting that long)."""
    record = load_move(coordination, op_id)
    earlier = (record.step_at or record.started_at) - int(by_s * 1000)
    coordination.save_journal(op_id, {**record.model_dump(mode="json"), "step_at": earlier})


def test_drive_takes_nothing_and_reads_only_the_index_when_no_move_is_open(shards):
    a, b, coordination = shards
    assert coordination.open_moves() == [] and moves.drive(a, coordination) == []
    begin_move(coordination, "m1", "shop", "b")
    assert coordination.open_moves() == ["m1"]
    assert moves.drive(b, coordination) == []  # stopping is the source's step
    [(op_id, exported)] = moves.drive(a, coordination)  # nothing on its way: drained at once
    assert op_id == "m1" and exported.outcome.startswith("exported")


def test_a_turn_that_stays_in_flight_past_the_drain_bound_rolls_the_move_back_and_input_resumes(shards):
    a, b, coordination = shards
    _dead_turn(a, 1)
    begin_move(coordination, "m1", "shop", "b")
    waiting = moves.drive(a, coordination)[0][1]
    assert waiting.outcome == "draining: 1 on its way, 0 customer(s) with replies to send"
    assert pipeline.ingest(a, page(2, buyer="b2").model_dump(mode="json")).outcome == "held"
    assert load_move(coordination, "m1").detail["waiting"] == waiting.outcome  # the operator sees it

    _overdue(coordination, "m1", moves.STOP_BOUND_S + 1)
    rolled = moves.drive(a, coordination)[0][1]  # one pass of the source's beat: back and resumed
    assert rolled.outcome.startswith("rolling back: stage stopping overran its bound of 40 s")
    record = load_move(coordination, "m1")
    assert (record.step, record.error) == (MoveStep.ROLLED_BACK, "KEFU_PLACEMENT_STAGE_OVERRUN")
    assert "draining: 1 on its way" in record.detail["problem"]
    assert coordination.open_moves() == [] and coordination.placement("shop").state == "active"
    assert [work.page["page_op_id"] for work in rolled.follow_ups if isinstance(work, Ingest)] == ["p2"]
    assert pipeline.ingest(a, page(3, buyer="b3").model_dump(mode="json")).outcome == "ingested"  # input resumed
    assert moves.drive(a, coordination) == [] and moves.drive(b, coordination) == []


def test_an_import_not_taken_within_its_bound_rolls_back_on_the_source_alone(shards):
    """The target took the slice but died before its journal step: the source rolls back by
    itself, and the target, back again, discards what it imported (runtime.placement.directory)."""
    a, b, coordination = shards
    begin_move(coordination, "m1", "shop", "b")
    assert moves.advance(a, coordination, "m1").outcome.startswith("exported")
    assert moves.drive(a, coordination) == []  # the import is the target's, within its bound
    stale = load_move(coordination, "m1")  # the target read it, and is importing
    _overdue(coordination, "m1", moves.IMPORT_BOUND_S + 1)
    [(_, rolled)] = moves.drive(a, coordination)
    assert rolled.outcome.startswith("rolling back: stage exported overran its bound of 120 s")
    assert "; rolled back" in rolled.outcome  # in the same pass: no step of the target's
    assert load_move(coordination, "m1").step == MoveStep.ROLLED_BACK
    assert coordination.placement("shop").shard == "a" and coordination.placement("shop").state == "active"
    with pytest.raises(moves.MoveRaced):  # the target's import commits, its journal step cannot
        moves._import(b, coordination, stale)
    settings = b.settings
    discard = discarder(b.store, None, settings.sessions_dir, settings.memory_images_dir)
    assert rebuild_directory(b.store, coordination, "b", pipeline.resume, discard).discarded == ["shop"]
    with b.store.read() as conn:
        assert local_placement(conn, "shop") is None


def test_an_import_refused_by_the_target_rolls_back_at_once_and_names_the_route_taken(shards):
    """Route ids are chosen by operators, per shard; one the target gives another account
    refuses the import before anything is written, and the account is served again by its
    source at the next pass, not after the import's bound."""
    a, b, coordination = shards
    create_account(b.store, AccountSpec(id="other", platform="simulator", identity="seller-2"))
    create_route(b.store, RouteSpec(id="shop-direct", account_id="other", conversation_type="direct"), "op-r")
    begin_move(coordination, "m1", "shop", "b")
    assert moves.advance(a, coordination, "m1").outcome.startswith("exported")
    [(_, refused)] = moves.drive(b, coordination)
    assert refused.outcome == "import refused with KEFU_PLACEMENT_ID_CONFLICT; rolling back"
    record = load_move(coordination, "m1")
    assert (record.step, record.error) == (MoveStep.ROLLING_BACK_SOURCE, "KEFU_PLACEMENT_ID_CONFLICT")
    assert "'shop-direct' belong to another account" in record.detail["problem"]
    with b.store.read() as conn:
        assert local_placement(conn, "shop") is None  # nothing of the slice written
    [(_, rolled)] = moves.drive(a, coordination)
    assert rolled.outcome.startswith("rolled back") and load_move(coordination, "m1").step == MoveStep.ROLLED_BACK
    assert pipeline.ingest(a, page(2).model_dump(mode="json")).outcome == "ingested"  # input resumed


def test_an_imported_move_only_goes_forward(shards):
    a, b, coordination = shards
    begin_move(coordination, "m1", "shop", "b")
    moves.advance(a, coordination, "m1")
    imported = moves.save_move(coordination, load_move(coordination, "m1"), step=MoveStep.IMPORTED)
    with pytest.raises(KefuError, match="can only go on"):
        begin_rollback(coordination, imported)


def test_a_step_taken_over_a_journal_that_changed_meanwhile_writes_nothing(shards):
    a, b, coordination = shards
    begin_move(coordination, "m1", "shop", "b")
    moves.advance(a, coordination, "m1")
    stale = load_move(coordination, "m1")  # the target read it, then the source rolled back
    begin_rollback(coordination, stale)
    with pytest.raises(moves.MoveRaced):
        moves.save_move(coordination, stale, step=MoveStep.IMPORTED)
    assert load_move(coordination, "m1").step == MoveStep.ROLLING_BACK_SOURCE


def test_beat_alone_finishes_a_move_whose_mover_died_after_writing_the_journal(shards):
    a, b, coordination = shards
    sent = _replied(a, 1)
    pipeline.deliver(a, sent)
    begin_move(coordination, "m1", "shop", "b")
    coordination.place(  # as if the mover died before marking the directory: the source does it
        coordination.placement("shop").model_copy(update={"state": PlacementState.ACTIVE, "move": None}),
        expected=coordination.placement("shop"),
    )
    passes = 0
    while load_move(coordination, "m1").step not in moves.FINAL_STEPS:
        moves.drive(a, coordination)
        moves.drive(b, coordination)
        passes += 1
        assert passes <= 3, load_move(coordination, "m1")
    assert load_move(coordination, "m1").step == MoveStep.DONE and coordination.open_moves() == []
    assert coordination.placement("shop").shard == "b" and _state(b.store, sent) == "sent"
