"""The account directory rebuilt from the shards' stores after the coordination store lost it
(runtime.placement.directory): accounts are entered again, and a move whose journal and entry were lost
ends where the stores say, never with an account paused for ever."""

from __future__ import annotations

from pathlib import Path

from runtime import pipeline
from runtime.placement import moves
from runtime.placement.directory import Rebuilt, discarder, enter_accounts, rebuild_directory
from runtime.placement.moves import begin_move, flip, load_move
from runtime.placement.shards import Placement
from runtime.store.states import MoveStep, PlacementState
from tests.local_services import Local
from tests.unit.test_moves import _replied, page
from tests.unit.test_moves import shards as shards  # the fixture: shards a (serving `shop`) and b
from worker.coordination import LocalCoordinator


def _rebuild(services: Local, coordination: LocalCoordinator) -> Rebuilt:
    settings = services.settings
    discard = discarder(services.store, None, settings.sessions_dir, settings.memory_images_dir)
    return rebuild_directory(services.store, coordination, settings.shard, pipeline.resume, discard)


def _wiped(tmp_path: Path) -> LocalCoordinator:
    """The coordination store after Redis restarted empty: no directory, no journal."""
    return LocalCoordinator(tmp_path / "wiped.sqlite")


def test_an_active_account_is_entered_again_and_can_be_moved(shards, tmp_path):
    a, b, _ = shards
    wiped = _wiped(tmp_path)
    assert enter_accounts(a.store, wiped, "a").elsewhere == []
    assert wiped.placement("shop") == Placement(account_id="shop", shard="a")
    assert begin_move(wiped, "m1", "shop", "b").step == MoveStep.STOPPING  # no KEFU_ACCOUNT_NOT_PLACED
    assert _rebuild(a, wiped).entered == 0  # a live move is left alone
    assert wiped.placement("shop").state == PlacementState.MOVING


def test_an_active_entry_of_a_newer_generation_wins_and_the_older_shard_hears_of_it(shards, tmp_path):
    a, _, _ = shards
    wiped = _wiped(tmp_path)
    wiped.place(Placement(account_id="shop", shard="b", generation=2), expected=None)
    assert enter_accounts(a.store, wiped, "a").elsewhere == ["shop"]
    assert wiped.placement("shop").shard == "b"


def test_a_move_lost_before_the_flip_is_served_where_it_was_and_the_import_is_discarded(shards, tmp_path, monkeypatch):
    a, b, coordination = shards
    monkeypatch.setattr(moves, "DRAIN_S", 0.0)
    _replied(a, 1)
    begin_move(coordination, "m1", "shop", "b")
    assert moves.advance(a, coordination, "m1").outcome.startswith("exported")
    held = page(2).model_dump(mode="json")
    assert pipeline.ingest(a, held).outcome == "held"
    assert moves.advance(b, coordination, "m1").outcome.startswith("imported")

    wiped = _wiped(tmp_path)  # the directory and the journal are gone mid-move
    assert _rebuild(b, wiped).discarded == []  # nothing says where it lives yet: b waits
    rebuilt = _rebuild(a, wiped)
    [resumed] = rebuilt.resumed
    assert [work.page["page_op_id"] for work in resumed.follow_ups if isinstance(work, pipeline.Ingest)] == ["p2"]
    assert wiped.placement("shop") == Placement(account_id="shop", shard="a")
    assert pipeline.ingest(a, held).outcome == "ingested"
    assert _rebuild(b, wiped).discarded == ["shop"]
    with b.store.read() as conn:
        assert conn.execute("SELECT count(*) FROM account_placement").scalar() == 0
    assert _rebuild(a, wiped) == Rebuilt([], 0, [], [])  # nothing more to do


def test_a_move_lost_after_the_source_released_it_resumes_on_the_target(shards, tmp_path):
    a, b, coordination = shards
    begin_move(coordination, "m1", "shop", "b")
    assert moves.advance(a, coordination, "m1").outcome.startswith("exported")
    moves.advance(b, coordination, "m1")
    flip(coordination, load_move(coordination, "m1"))
    moves.advance(a, coordination, "m1")
    assert load_move(coordination, "m1").step == MoveStep.RELEASED

    wiped = _wiped(tmp_path)
    assert _rebuild(b, wiped).resumed == []  # until the source's tombstone says where it went
    assert _rebuild(a, wiped).resumed == []
    assert wiped.placement("shop") == Placement(account_id="shop", shard="b", generation=2)
    assert len(_rebuild(b, wiped).resumed) == 1
    assert pipeline.ingest(b, page(2).model_dump(mode="json")).outcome == "ingested"
