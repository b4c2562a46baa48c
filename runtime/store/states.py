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
    OBSERVED = "observed"  # live input while its route observes (listens, never answers): kept, never admitted


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


class PlacementState(StrEnum):
    """account_placement.state and the directory's (SPEC 3.12): where an account lives while it
    is served, moved, or gone to another shard."""

    ACTIVE = "active"  # served here
    MOVING = "moving"  # leaving: input paused, no listener, what is on its way still goes out
    SEALED = "sealed"  # leaving: drained; its slice is exported and nothing of it is sent here
    IMPORTING = "importing"  # arrived here: input paused until the move resumes it
    MOVED = "moved"  # gone to `shard`: late pages for it are forwarded there


class MoveStep(StrEnum):
    """The step a move of an account to another shard is at (runtime.placement.moves)."""

    STOPPING = "stopping"  # the source pauses, drains and exports the account
    EXPORTED = "exported"  # the target imports the slice
    IMPORTED = "imported"  # the mover flips the directory
    FLIPPED = "flipped"  # the source removes the account, keeps a forwarding tombstone
    RELEASED = "released"  # the target resumes the account
    DONE = "done"
    ROLLING_BACK_TARGET = "rolling-back-target"  # the target discards what it imported
    ROLLING_BACK_SOURCE = "rolling-back-source"  # the source serves the account again
    ROLLED_BACK = "rolled-back"


class AlertState(StrEnum):
    """alert.state (runtime.operators.alerts): raised, then delivered, or refused for good by its sink."""

    RAISED = "raised"
    DELIVERED = "delivered"
    REFUSED = "refused"  # the sink answered that it will never take it (e.g. HTTP 400)


class SessionOrigin(StrEnum):
    """How an agent session began (its header, runtime.agent.rotation)."""

    FIRST = "first"  # the customer's first session
    ROTATED = "rotated"  # continues the customer's previous session, which ended (header reason)
    FORKED = "forked"  # a copy of a prefix of its parent, then its own
    LEGACY = "legacy"  # began before sessions had headers


class RotationReason(StrEnum):
    """Why a customer's session ended and a new one began."""

    OPERATOR = "operator"  # `kefu sessions rotate`
    INACTIVITY = "inactivity"  # nothing happened for KEFU_AGENT__SESSION_IDLE_H
    MODEL_CHANGE = "model-change"  # the configured model is not the session's
    PROFILE_CHANGE = "profile-change"  # the customer's route names another agent profile now
    DAMAGED = "damaged"  # its log was damaged before its tail (runtime.agent.sessions)
    FORK = "fork"  # `kefu sessions fork`


class QuestionState(StrEnum):
    """pending_question.state (runtime.agent.pending_questions)."""

    PENDING = "pending"  # asked; no later turn has seen it yet
    OFFERED = "offered"  # a later batch's turn was given it (again on that batch's retries)
    SUPERSEDED = "superseded"  # the agent asked something else before any turn saw it


class ConversationStatus(StrEnum):
    """customer.status: where a conversation stands for the shop's team (runtime.customers.assignment)."""

    OPEN = "open"
    WAITING = "waiting"  # the agent handed off and no operator has taken it: waiting for the shop
    RESOLVED = "resolved"  # an operator resolved it and the agent handles it again
    SNOOZED = "snoozed"  # out of the open list until `snoozed_until` or the buyer's next message
