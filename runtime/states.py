"""Every state a delivery row or a listener can be in, as one enum per machine.

SQL names states by their values ('pending', 'result-unknown'); tests/unit/test_states.py
checks that every state literal in runtime's SQL is a member of its machine, so a typo in a
query fails a test instead of matching nothing.
"""

from __future__ import annotations

from enum import StrEnum


class MessageState(StrEnum):
    """inbound_message.state: a buyer line waits for admission, is claimed by a batch, and is
    committed when its turn logged it. Other lines never wait."""

    PENDING = "pending"
    CLAIMED = "claimed"
    COMMITTED = "committed"
    IGNORED = "ignored"  # the agent's own lines, seen again as the platform's echo
    HISTORY = "history"  # ingested as history, not as live input
    SUPPRESSED = "suppressed"  # live input while automatic handling is paused: kept, never admitted


class BatchState(StrEnum):
    """admission_batch.state (SPEC 3.6)."""

    CLAIMED = "claimed"  # admitted; its turn has not logged it yet
    COMMITTED = "committed"  # in the session log; the turn runs
    DONE = "done"
    REVOKED = "revoked"  # handling was paused before or during its turn


class OutboxState(StrEnum):
    """outbox_request.state (SPEC 3.8)."""

    PENDING = "pending"
    SENDING = "sending"  # an attempt has begun and its outcome is not recorded yet
    SENT = "sent"
    FAILED = "failed"
    RESULT_UNKNOWN = "result-unknown"  # only evidence settles it, never a second blind send
    REVOKED = "revoked"
    ROUTE_CHANGED = "route-changed"
    SKIPPED = "skipped"


SETTLED = frozenset(
    {OutboxState.SENT, OutboxState.FAILED, OutboxState.REVOKED, OutboxState.ROUTE_CHANGED, OutboxState.SKIPPED}
)


class AttemptState(StrEnum):
    """outbox_attempt.state: one platform call."""

    STARTED = "started"
    SENT = "sent"
    NOT_SUBMITTED = "not-submitted"
    REJECTED = "rejected"
    UNKNOWN = "unknown"


class ListenerState(StrEnum):
    """account.listener_state (SPEC 3.11): stopped → starting → running → reconnecting → … →
    failed."""

    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    RECONNECTING = "reconnecting"
    FAILED = "failed"


class Reception(StrEnum):
    """What an account's checkpoint reports about its intake (SPEC 3.10)."""

    RUNNING = "running"
    DRAINING = "draining"
    PAUSED = "paused"
    STOPPED = "stopped"
