"""The steps a shard takes in a move of an account (runtime.placement.moves), on `kefu.placement.<shard>`.

`advance` takes the move's next step if it is this shard's, then hands the move on to the
shard whose step is next (so a move runs through without the mover); `drive`, from beat on
every shard, takes this shard's steps of the open moves and rolls back the ones past their
bound, so a move finishes, or rolls back, though its mover or a worker died (a step is
idempotent, and one runs at a time per move and shard)."""

from __future__ import annotations

from celery import Celery, Task

from runtime.placement import moves
from runtime.store.states import MoveStep
from worker.context import runtime_for
from worker.dispatch import dispatch
from worker.tasks.base import HOUSEKEEPING, kefu_task


@kefu_task("kefu.placement.advance")
def advance(self: Task, op_id: str) -> str:
    services = runtime_for(self.app)
    before = moves.load_move(services.coordination, op_id)
    step = moves.advance(services, services.coordination, op_id)
    dispatch(self.app, step.follow_ups)
    hand_on(self.app, op_id, before.step if before else None)
    return step.outcome


@kefu_task("kefu.placement.drive", **HOUSEKEEPING)
def drive(self: Task) -> str:
    services = runtime_for(self.app)
    outcomes = []
    for op_id, step in moves.drive(services, services.coordination):
        dispatch(self.app, step.follow_ups)
        hand_on(self.app, op_id, None)
        outcomes.append(f"{op_id}: {step.outcome}")
    return "; ".join(outcomes) or "no move of this shard's to take"


def hand_on(app: Celery, op_id: str, was: MoveStep | None) -> None:
    """The other shard takes its step now rather than at its next beat pass: sent only when the
    step changed here and is now the other shard's, so two shards never bounce a step."""
    services = runtime_for(app)
    record = moves.load_move(services.coordination, op_id)
    if record is None or record.step == was:
        return
    actor = record.actor()
    if actor is not None and actor != services.settings.shard:
        from worker.queues import queue_name

        app.tasks[advance.name].apply_async((op_id,), queue=queue_name("placement", actor))


@kefu_task("kefu.placement.directory", **HOUSEKEEPING)
def directory(self: Task) -> str:
    """Beat: enter this shard's accounts in the directory again and end the moves it lost
    (runtime.placement.directory). Cheap: a read of the store's placements and one lookup per account."""
    rebuilt = runtime_for(self.app).rebuild_directory()
    for step in rebuilt.resumed:
        dispatch(self.app, step.follow_ups)
    return (
        f"{rebuilt.entered} entered, {len(rebuilt.resumed)} resumed, {len(rebuilt.discarded)} discarded,"
        f" {len(rebuilt.elsewhere)} elsewhere"
    )
