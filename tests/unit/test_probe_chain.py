"""The benchmark's no-op chain (worker.tasks.probe) has the pipeline's shape: one hop on each
of the four pipeline queues of the shard, each publishing the next, the last one under the
probe id with its result kept. No broker: publishing is recorded, each hop run by hand."""

from __future__ import annotations

from typing import Any

import pytest

from worker.celery_app import make_app

HOPS = [f"kefu.{family}.probe_chain" for family in ("ingest", "agent", "outbox", "receipts")]


def test_each_hop_is_on_its_family_queue_of_the_shard(settings) -> None:
    app = make_app(settings.model_copy(update={"shard": "s7"}))
    queues = [app.amqp.router.route({}, name)["queue"].name for name in HOPS]
    assert queues == ["kefu.ingest.s7", "kefu.agent.s7", "kefu.outbox.s7", "kefu.receipts.s7"]
    assert [app.tasks[name].ignore_result for name in HOPS] == [True, True, True, False]


def test_each_hop_publishes_the_next_and_the_last_runs_under_the_probe_id(
    settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(settings)
    published: list[tuple[str, Any, str | None]] = []
    monkeypatch.setattr(
        app, "send_task", lambda name, args, kwargs, task_id=None, **_: published.append((name, args, task_id))
    )
    for hop in HOPS[:-1]:
        app.tasks[hop]("probe-1")
    assert [name for name, _, _ in published] == HOPS[1:]
    assert all(list(args) == ["probe-1"] for _, args, _ in published)
    assert published[-1][2] == "probe-1"
    assert isinstance(app.tasks[HOPS[-1]]("probe-1"), float)
