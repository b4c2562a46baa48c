"""A no-op chain of kefu's shape, for benchmarks (bench.e2e): one task per pipeline queue
family, ingest -> agent -> outbox -> receipts, each publishing the next with apply_async.

It measures what the broker hops of a buyer message cost without kefu's work: the tasks take
the same base (worker.tasks.base) and queues (`kefu.<family>.<shard>`, by name: celery_app) as
the pipeline's, and do nothing but the hop. The publisher picks a probe id; the last hop runs
under that task id and keeps its result, the time it ran, in the result backend, where the
publisher collects it (as it reads a real reply's time from the platform it was sent to).
"""

from __future__ import annotations

import time

from celery import Task

from worker.tasks.base import kefu_task


@kefu_task("kefu.ingest.probe_chain")
def ingest_hop(self: Task, probe_id: str) -> None:
    self.app.tasks[agent_hop.name].apply_async((probe_id,))


@kefu_task("kefu.agent.probe_chain")
def agent_hop(self: Task, probe_id: str) -> None:
    self.app.tasks[outbox_hop.name].apply_async((probe_id,))


@kefu_task("kefu.outbox.probe_chain")
def outbox_hop(self: Task, probe_id: str) -> None:
    self.app.tasks[receipts_hop.name].apply_async((probe_id,), task_id=probe_id)


@kefu_task("kefu.receipts.probe_chain", ignore_result=False)
def receipts_hop(self: Task, probe_id: str) -> float:
    """The end of the chain: its result (stored under the probe id) is when it ran (epoch s)."""
    return time.time()
