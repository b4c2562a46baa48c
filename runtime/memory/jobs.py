"""Memory work outside a turn (the `kefu.memory` tasks run these): archive a customer's session
after a turn that ended above the trigger, re-archive its recall block, score backlogs.

Each job is idempotent: it re-reads the session log and the memory store and does only what
is still due. Jobs that touch a session log take the customer's writer lease, the same one a
turn holds, so a session never has two writers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from runtime.admission.batches import load_customer
from runtime.agent.context import view_tokens
from runtime.agent.repair import repair
from runtime.agent.script_clock import conversation_clock
from runtime.agent.session_log import SessionLog
from runtime.agent.sessions import open_session, session_path
from runtime.agent.tools import recorded_sends
from runtime.memory.engine import (
    MemoryEngine,
    SessionMemory,
    archive,
    judge_task,
    rearchive,
    scope_of,
)
from runtime.memory.heuristic import score_backlog
from runtime.store import DeliveryStore, leases, now_ms

Busy = Literal["busy", "no-session"]
Result = TypeVar("Result")


@dataclass(frozen=True)
class SessionJobs:
    """Where session jobs run: the delivery store (customers, leases), the sessions folder, the
    memory engine, and how long a job may hold the customer's lease."""

    store: DeliveryStore
    sessions_dir: Path
    engine: MemoryEngine
    lease_s: float

    def run(self, customer_id: int, job: Callable[[SessionLog, str, SessionMemory], Result]) -> Result | Busy:
        """Run `job` on the customer's session under its writer lease; then, when no model
        scores, score what the job left pending with the heuristic. "no-session" also for a
        customer erased meanwhile (runtime.customers.erasure): it is looked for again once the lease is
        held, which an erasure waits for, so its session is never opened (created) again."""
        if not self._has_session(customer_id):
            return "no-session"
        with self.store.read() as conn:
            clock = conversation_clock(conn, customer_id)
        memory = self.engine.session(customer_id, clock)
        with leases.held(self.store, f"customer:{customer_id}", self.lease_s) as fence:
            if fence is None:
                return "busy"
            if not self._has_session(customer_id):  # erased between the look and the lease
                return "no-session"
            session = open_session(self.store, customer_id, self.sessions_dir, fence)
            # a turn that crashed mid-way is closed the same way its next turn would
            repair(session.log, recorded_sends(self.store, session.session_id))
            result = job(session.log, session.session_id, memory)
        if not self.engine.model_scores:
            score_scope(memory)
        return result

    def _has_session(self, customer_id: int) -> bool:
        """The customer is there (not erased) and has a session log."""
        with self.store.read() as conn:
            customer = load_customer(conn, customer_id)
        session_id = customer.session_id if customer else None
        return session_id is not None and session_path(self.sessions_dir, session_id).exists()


def archive_job(log: SessionLog, session_id: str, memory: SessionMemory) -> str:
    """Archive the session if it is above the trigger: why it did or did not."""
    return archive(log, session_id, memory, memory.settings.trigger_percent).reason


def rearchive_job(log: SessionLog, session_id: str, memory: SessionMemory) -> str:
    """Trim the recall block by the compress share of the context: how many blocks went."""
    target = math.ceil(view_tokens(log, judge_task(memory)) * memory.settings.compress_percent / 100)
    return str(rearchive(log, memory, target)[0])


def score_scope(memory: SessionMemory) -> int:
    """Heuristic scores for every pending or review folder of a scope; how many were scored."""
    return score_backlog(memory.store, memory.scope)


def backlog(engine: MemoryEngine) -> list[str]:
    """Scopes whose pending folders the heuristic should score now: all of them when no model
    scores, else those a model left pending longer than `heuristic_after_s`, or with more than
    `max_pending` waiting (backpressure, source scoring.maxPending with the onPressure fallback:
    the heuristic takes that customer's backlog at once, and the model reviews what it likes)."""
    if not engine.model_scores:
        return list(engine.store.pending())
    late = engine.store.pending(now_ms() - int(engine.settings.heuristic_after_s * 1000))
    pressed = {scope for scope, waiting in engine.store.pending().items() if waiting > engine.settings.max_pending}
    return sorted(late.keys() | pressed)


def scope_memory(engine: MemoryEngine, scope: str) -> SessionMemory:
    customer_id = int(scope.removeprefix("customer-"))
    if scope_of(customer_id) != scope:
        raise ValueError(f"not a customer scope: {scope!r}")
    return engine.session(customer_id)
