"""A customer's agent session ends and a new one begins: rotation and fork (seed 002 5.1, 5.7-5.8).

A session rotates when an operator asks (`kefu sessions rotate`), when nothing happened in it
for `KEFU_AGENT__SESSION_IDLE_H`, when the configured model is not the one it began with, when
the customer's route names another agent profile than the one it began under
(runtime.agent.profiles), or when its log is damaged (runtime.agent.sessions). Before the
switch, every turn of the old session that long-term memory does not hold yet is archived into
the customer's memory scope, so the new session recalls it like any older memory; the buyer's
whole history stays in the delivery store for `im_query_history`. The new session's header
names its parent, why the parent ended and the profile it begins under, and its system message
tells the model so.

A fork copies a prefix of the current session, up to an inclusive seq, into a new session:
the copied events as they were, the `session/end-seed` marker where the copy ends, then
closers for whatever the prefix left open (tool results the parent may have had later, the
step, `turn/end(forked)`). The child becomes the customer's current session; the parent's log
is left as it was. An operator forks to take the agent back to before a turn that went wrong.

Both run under the customer's writer lease, the one a turn holds, so they never race a turn;
a rotation due at a turn's start runs inside that turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from config import AgentSettings
from config.settings import DEFAULT_PROFILE
from runtime.admission.batches import load_customer
from runtime.agent.profiles import AgentProfile, customer_profile
from runtime.agent.repair import last_of, open_turn_closers, repair
from runtime.agent.script_clock import ConversationClock, conversation_clock
from runtime.agent.session_log import SESSION_EVENT, SessionEvent, TurnEnd, TurnStart, batch_turns, write_log
from runtime.agent.sessions import (
    KnownSession,
    OpenSession,
    begin_session,
    next_session_id,
    open_session,
    session_path,
)
from runtime.errors import CustomerUnknown, KefuError
from runtime.memory.engine import MemoryEngine, SessionMemory, archive_rest
from runtime.memory.heuristic import score_backlog
from runtime.store import Connection, DeliveryStore, leases, now_ms, queries
from runtime.store.leases import Fence, fenced
from runtime.store.states import BatchState, RotationReason, SessionOrigin
from runtime.store.tables import SessionHeader

ROTATED_NOTE = (
    "[kefu] 这是与这位顾客的新会话（上一会话已结束：{reason}）。之前的对话已存入长期记忆，需要时用记忆工具查找；"
    "与顾客的全部消息可用 im_query_history 查看。不要重复发送顾客可能已经收到的内容。"
)
_REASONS = {
    RotationReason.OPERATOR: "运营人员开启了新会话",
    RotationReason.INACTIVITY: "长时间没有新消息",
    RotationReason.MODEL_CHANGE: "更换了模型",
    RotationReason.PROFILE_CHANGE: "店铺为这个会话换了客服设定",
    RotationReason.DAMAGED: "会话记录损坏",
    RotationReason.FORK: "运营人员从较早的位置分叉",
}


def rotated_note(header: SessionHeader | None) -> str | None:
    """What a rotated session's system message adds (a damaged parent has its own note)."""
    if header is None or header.origin != SessionOrigin.ROTATED or header.reason in (None, RotationReason.DAMAGED):
        return None
    return ROTATED_NOTE.format(reason=_REASONS[header.reason])


def rotation_due(
    session: OpenSession, batch_id: str, agent: AgentSettings, now: int, profile: str = DEFAULT_PROFILE
) -> RotationReason | None:
    """Why the session should end before this batch's turn, if it should. Never while the batch
    has a turn in it (an interrupted one gets its follow-up in the same session), and never for
    a session with no events yet. `agent` and `profile`: the turn's profile (runtime.agent.
    profiles); a session begun before profiles (no profile in its header) began under the default."""
    log = session.log
    if not log.events or batch_turns(log, batch_id):
        return None
    header = session.header
    if agent.rotate_on_model_change and header is not None and header.model not in (None, agent.model_name):
        return RotationReason.MODEL_CHANGE
    if agent.rotate_on_model_change and header is not None and (header.profile or DEFAULT_PROFILE) != profile:
        return RotationReason.PROFILE_CHANGE
    if agent.session_idle_h is not None and now - log.events[-1].at > agent.session_idle_h * 3_600_000:
        return RotationReason.INACTIVITY
    return None


def rotate(
    store: DeliveryStore,
    customer_id: int,
    sessions_dir: Path,
    fence: Fence | None,
    reason: RotationReason,
    model: str | None,
    memory: SessionMemory | None,
    current: OpenSession | None = None,
    profile: str | None = None,
) -> OpenSession:
    """End the customer's current session (`current`, when the caller opened it) and begin a new
    one under `model` and `profile`; the new one, opened for appending. The caller holds the
    customer's writer lease."""
    old = current or open_session(store, customer_id, sessions_dir, fence)
    repair(old.log)
    if memory is not None and archive_rest(old.log, old.session_id, memory):
        # Scored now, by the heuristic even where a model scores: unscored folders never
        # recall, and the new session's first turn should find what the old one held.
        score_backlog(memory.store, memory.scope)
    with fenced(store, fence) as conn:
        header = _next_header(conn, customer_id, model, SessionOrigin.ROTATED, reason, old.session_id, profile)
        _begin(conn, header, old.session_id)
    session_path(sessions_dir, header.id).unlink(missing_ok=True)  # a fork's file that never began
    return open_session(store, customer_id, sessions_dir, fence, KnownSession(header.id, False, header))


def fork(
    store: DeliveryStore,
    customer_id: int,
    sessions_dir: Path,
    fence: Fence | None,
    model: str | None,
    boundary: int | None = None,
    profile: str | None = None,
) -> SessionHeader:
    """Fork the customer's current session after the event at seq `boundary` (inclusive; None:
    its last event) and make the child current; the child's header. An unfinished turn at the
    parent's tail is closed first (no turn runs while the caller holds the lease: a crash left
    it), so a fork of the whole session copies no open tail."""
    parent = open_session(store, customer_id, sessions_dir, fence)
    repair(parent.log)
    events = parent.log.events
    if boundary is not None and not 0 <= boundary < len(events):
        raise KefuError(
            "KEFU_SESSION_BOUNDARY",
            f"session {parent.session_id} has "
            + (f"events 0..{len(events) - 1}; no event {boundary}" if events else "no events yet: nothing to fork"),
            "give the seq of the last event the fork keeps (`kefu rounds --customer ID`: turn t<N> starts at seq N)",
        )
    cut = len(events) - 1 if boundary is None else boundary
    _refuse_cut_into_open_batch(store, parent.session_id, events[: cut + 1])
    seed = fork_seed(events[: cut + 1], parent.session_id)
    with fenced(store, fence) as conn:
        header = _next_header(
            conn, customer_id, model, SessionOrigin.FORKED, RotationReason.FORK, parent.session_id, profile
        )
    header = header.model_copy(update={"inherited": cut + 1})
    path = session_path(sessions_dir, header.id)
    write_log(path, seed)  # before the switch: the child is never current without its seed
    with fenced(store, fence) as conn:
        _begin(conn, header, parent.session_id)
    return header


def _refuse_cut_into_open_batch(store: DeliveryStore, session_id: str, prefix: list[SessionEvent]) -> None:
    """A cut inside the turn of a batch still waiting for its answer is refused: the child would
    close it as forked and answer the batch again in a follow-up, while the parent may already
    have sent replies after the cut that the child cannot know of (a second reply to one buyer
    message). A cut before that turn (the child answers the batch afresh, or commits it if the
    outbox shows it was answered) or after its end is safe."""
    at = last_of(prefix, TurnStart | TurnEnd)
    turn = prefix[at] if at is not None else None
    if not isinstance(turn, TurnStart):
        return
    with store.read() as conn:
        state = conn.execute(queries.admission_batch.STATE, {"b": turn.batch_id}).scalar()
    if state in (BatchState.CLAIMED, BatchState.COMMITTED):
        raise KefuError(
            "KEFU_SESSION_BOUNDARY",
            f"event {len(prefix) - 1} of session {session_id} is inside turn {turn.turn}, whose batch still"
            " waits for its answer",
            f"fork at {turn.seq - 1} or earlier, or once the batch is answered",
        )


def fork_seed(prefix: list[SessionEvent], parent: str) -> list[SessionEvent]:
    """The copied prefix, the end-seed marker, and the closers of a turn the prefix left open."""
    at = prefix[-1].at if prefix else now_ms()
    seed = [*prefix, SESSION_EVENT.validate_python(
        {"seq": len(prefix), "type": "session/end-seed", "at": at, "inherited": True, "parent": parent}
    )]  # fmt: skip
    for type, data in open_turn_closers(seed, "forked"):
        seed.append(SESSION_EVENT.validate_python({"seq": len(seed), "type": type, **data}))
    return seed


def _next_header(
    conn: Connection,
    customer_id: int,
    model: str | None,
    origin: SessionOrigin,
    reason: RotationReason,
    parent: str,
    profile: str | None,
) -> SessionHeader:
    return SessionHeader(
        id=next_session_id(conn, customer_id),
        customer_id=customer_id,
        created_at=now_ms(),
        model=model,
        origin=origin,
        reason=reason,
        parent=parent,
        profile=profile,
    )


def _begin(conn: Connection, header: SessionHeader, replacing: str) -> None:
    if not begin_session(conn, header, replacing):
        raise KefuError(
            "KEFU_SESSION_CHANGED",
            f"customer {header.customer_id}'s session changed while {replacing} was being replaced",
            "run the command again",
        )


# --- operator actions (`kefu sessions rotate | fork`) -----------------------------------------


def rotate_by_operator(
    store: DeliveryStore, customer_id: int, sessions_dir: Path, engine: MemoryEngine | None, agent: AgentSettings
) -> SessionHeader:
    """A new session for the customer now, memory carrying them across; its header. It begins
    under the profile of the customer's route (runtime.agent.profiles), as their next turn runs."""
    profile = customer_profile(store, customer_id, agent)
    with _customer_lease(store, customer_id, agent) as (fence, clock):
        memory = engine.session(customer_id, clock) if engine is not None and profile.memory else None
        reason, model = RotationReason.OPERATOR, profile.model_name
        session = rotate(store, customer_id, sessions_dir, fence, reason, model, memory, profile=profile.name)
    assert session.header is not None  # rotate wrote it
    return session.header


def fork_by_operator(
    store: DeliveryStore, customer_id: int, sessions_dir: Path, agent: AgentSettings, boundary: int | None
) -> SessionHeader:
    profile: AgentProfile = customer_profile(store, customer_id, agent)
    with _customer_lease(store, customer_id, agent) as (fence, _):
        return fork(store, customer_id, sessions_dir, fence, profile.model_name, boundary, profile.name)


@contextmanager
def _customer_lease(
    store: DeliveryStore, customer_id: int, agent: AgentSettings
) -> Iterator[tuple[Fence, ConversationClock]]:
    with store.read() as conn:
        customer = load_customer(conn, customer_id)
        clock = conversation_clock(conn, customer_id)
    if customer is None:
        raise CustomerUnknown(customer_id)
    if customer.session_id is None:
        raise KefuError(
            "KEFU_SESSION_NONE", f"customer {customer_id} has no agent session yet", "wait for the agent's first turn"
        )
    with leases.held(store, f"customer:{customer_id}", agent.turn_lease_s) as fence:
        if fence is None:
            raise KefuError(
                "KEFU_SESSION_BUSY",
                f"customer {customer_id}'s session is in use (a turn or a memory job is running)",
                "try again when the turn has ended",
            )
        yield fence, clock
