"""The steps a shard takes in a move of an account (runtime.moves), on `kefu.placement.<shard>`:
the mover sends `advance` to the shard whose step is next, and sends it again until the
journal moves on (a step is idempotent, and one runs at a time per move)."""

from __future__ import annotations

from celery import Task

from runtime import moves
from worker.context import runtime_for
from worker.dispatch import dispatch
from worker.tasks.base import kefu_task


@kefu_task("kefu.placement.advance")
def advance(self: Task, op_id: str) -> str:
    services = runtime_for(self.app)
    step = moves.advance(services, services.coordination, op_id)
    dispatch(self.app, step.follow_ups)
    return step.outcome


@kefu_task("kefu.placement.directory")
def directory(self: Task) -> str:
    """Beat: enter this shard's accounts in the directory again and end the moves it lost
    (runtime.directory). Cheap: a read of the store's placements and one lookup per account."""
    rebuilt = runtime_for(self.app).rebuild_directory()
    for step in rebuilt.resumed:
        dispatch(self.app, step.follow_ups)
    return (
        f"{rebuilt.entered} entered, {len(rebuilt.resumed)} resumed, {len(rebuilt.discarded)} discarded,"
        f" {len(rebuilt.elsewhere)} elsewhere"
    )
