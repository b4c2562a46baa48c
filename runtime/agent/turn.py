"""One agent turn over an admitted batch, recorded in the customer's session log (SPEC 3.7).

Order of durability: the batch is written to the session log and flushed before its messages
are committed in the delivery store; a crash before that commit is repaired on the next run
by finding the batch id in the log. A crash mid-turn is closed on the next load by closers
appended after the tail (never re-running a tool), followed by one follow-up turn.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import date, datetime
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo

from config import AgentSettings, OpenAISettings
from config.retries import model_call
from runtime.admission.batches import (
    commit_batch,
    finish_batch,
    nothing_to_admit,
    revoke_batch,
    turn_rows,
)
from runtime.admission.handling import is_current
from runtime.agent.context import context_use, view_tokens
from runtime.agent.pending_questions import PendingQuestion, offer, question_note
from runtime.agent.profiles import AgentProfile, default_profile
from runtime.agent.rendering import RenderableMessage, content_text, input_parts, shown
from runtime.agent.repair import close_unfinished, repair, waiting_for_model
from runtime.agent.rotation import rotate, rotated_note, rotation_due
from runtime.agent.script_clock import ConversationClock, conversation_clock
from runtime.agent.session_log import (
    MessageRead,
    RequestHeader,
    SessionLog,
    TurnStart,
    batch_turns,
)
from runtime.agent.sessions import DAMAGED_NOTE, KnownSession, OpenSession, begin_first_session, open_session
from runtime.agent.tools import TOOLS, Tools, TurnBinding, execute, recorded_sends
from runtime.agent.view import model_view
from runtime.inbound.media import stored_images, with_fetched_images, with_image_data
from runtime.memory.engine import MemoryEngine, SessionMemory, archive, judge_task, percent, recall
from runtime.memory.tools import MEMORY_TOOLS
from runtime.outbox.media import AttachmentPolicy
from runtime.outbox.read_receipts import mark_delivered, read_notice, undelivered_reads
from runtime.outbox.requests import ReplyCheck, replied_for
from runtime.ports import FOLLOW_UP_PREFIX, AssistantReply, ModelError, ModelProvider, ToolSpec
from runtime.store import Connection, DeliveryStore, now_ms
from runtime.store.leases import Fence, fenced
from runtime.store.states import BatchState
from runtime.store.tables import AdmissionBatch, BuyerRead, Customer, OutboxRequest

ROLE_SECTION = (
    "你在这一个会话里以本店客服账号的身份说话。顾客消息以带时间和标签的行给出。"
    "只有 im_send_message 工具的内容会发给顾客；你的普通文字只给店铺运营人员看。"
    "无法回答或顾客要求人工时，调用 im_handoff 转人工。"
    "没有时间和标签的用户消息是店铺运营人员直接对你说的话，不是聊天记录：用普通文字回答运营人员。"
)


def _system_prompt(persona: str) -> str:
    """The session's own sections: the configured persona and the one-conversation role. The
    memory sections are added to the view at each model call (runtime.agent.view)."""
    return "\n\n".join([persona, ROLE_SECTION])


FOLLOW_UP_TEXT = FOLLOW_UP_PREFIX + " 上一轮处理被中断。请先检查工具结果，再回复顾客（已发送的内容不要重复发送）。"

Outcome = Literal["complete", "interrupted", "error"]


@dataclass(frozen=True)
class TurnResult:
    batch_id: str
    # "revoked": handling was paused after admission, so the batch never ran
    # "waiting": a model call failed and is tried again after `retry_after_s`, in a new run
    outcome: Literal["complete", "interrupted", "error", "revoked", "waiting"]
    session_id: str | None
    archive_due: bool = False  # the turn ended above the memory trigger: the memory task archives
    retry_after_s: float = 0.0
    admit_next: bool = True  # False: the turn's last write found nothing for admission to decide


@dataclass(frozen=True)
class _RetryAfter:
    seconds: float


def _backoff_s(retry: OpenAISettings, attempt: int, retry_after_s: float | None = None) -> float:
    """The wait after the `attempt`th failed call: exponential, or longer when the provider
    said when to come back (a 429's Retry-After, which the provider bounds)."""
    return model_call(retry.retry_backoff_s).wait_s(attempt, retry_after_s)


def _deliver_reads(store: DeliveryStore, log: SessionLog, reads: list[BuyerRead], zone: ZoneInfo) -> None:
    """Give the session one `im/message-read` event per stored buyer receipt it has not had.
    The log is checked first, so a crash between the event and the store's mark adds none twice."""
    if not reads:
        return
    seen = {e.platform_message_id for e in log.of_type("im/message-read") if isinstance(e, MessageRead)}
    for read in reads:
        if read.platform_message_id not in seen:
            log.append(
                "im/message-read",
                request_id=read.request_id,
                platform_message_id=read.platform_message_id,
                read_at=read.read_at,
                text=read_notice(read, zone),
            )
    log.flush()
    mark_delivered(store, reads)


def _reconcile_session(
    store: DeliveryStore,
    turns: list[tuple[TurnStart, str | None]],
    batch: AdmissionBatch,
    fence: Fence | None,
    first_session: bool,
) -> bool:
    """The session log already holds this batch's finished turn but the store never heard
    (a crash between the two), or the log that held it was damaged and retired while the
    outbox shows the turn got as far as replying: commit and finish the batch, never run it
    again (a new session would derive new request ids and reply twice). True if it did. Only a
    customer's first session, begun now, needs no outbox check: any other log may not show a
    batch's replies (it continues a damaged one, its file was lost or restored from a copy)."""
    if not (turns and turns[-1][1] in ("complete", "error")):
        if turns or first_session:
            return False  # interrupted: a follow-up turn runs; or no turn of this customer ever replied
        with store.read() as conn:
            if not replied_for(conn, batch.customer_id, batch.id):
                return False
    with fenced(store, fence) as conn:
        commit_batch(conn, batch.id)
        finish_batch(conn, batch.id)
    return True


def _call_model(
    provider: ModelProvider,
    log: SessionLog,
    tools: list[ToolSpec],
    agent: AgentSettings,
    store: DeliveryStore,
    step: int,
    task: str = "",
    attempts_before: int = 0,
) -> AssistantReply | _RetryAfter | None:
    """One model call. Each failed attempt is logged and never shown to the model. After a
    transient failure with attempts left, says when to try again (the run ends there, and a new
    one goes on: no worker waits out a backoff); None when the model stayed unavailable. `task`
    is the memory scoring task of the system message. A vision model sees the buyers' images
    of the last `image_rounds` turns."""
    retry = agent.openai
    attempt = attempts_before + 1
    if attempt > retry.max_attempts:  # the attempts were spent (KEFU_AGENT__OPENAI__MAX_ATTEMPTS lowered)
        return None
    try:
        rounds = agent.image_rounds if retry.vision else 0
        view = model_view(log, task, rounds, lambda messages: with_image_data(store, messages))
        log.append("request/context", step=step, estimated_tokens=view_tokens(log, task),
                   window_tokens=agent.context_window_tokens)  # fmt: skip
        reply = provider.complete(view, tools)
    except ModelError as error:
        # Retry-After only when the provider gave one: a log without it still reads in a kefu
        # that predates the field (a rolling upgrade's older workers).
        waited = {"retry_after_s": error.retry_after_s} if error.retry_after_s is not None else {}
        log.append("assistant/attempt", attempt=attempt, code=error.code, status=error.status, **waited)
        log.flush()
        if not error.transient or attempt == retry.max_attempts:
            return None
        return _RetryAfter(_backoff_s(retry, attempt, error.retry_after_s))
    tokens, source = context_use(view_tokens(log, task), reply)
    return reply.model_copy(update={"usage": {**(reply.usage or {}), "context_tokens": tokens, "source": source}})


_StepCheck = tuple[bool, list[BuyerRead]]


def _step_check(conn: Connection, customer_id: int, epoch: int, with_reads: bool) -> _StepCheck:
    """Before each step: is the batch still the agent's to answer (no human took over), and
    what has the buyer read since (not for a step that only retries its model call)."""
    current = is_current(conn, customer_id, epoch)
    return current, undelivered_reads(conn, customer_id) if current and with_reads else []


@dataclass
class _Turn:
    """A turn under way: the rows it was opened with, its session, and where its steps go on."""

    customer: Customer
    batch: AdmissionBatch
    profile: AgentProfile  # the customer's agent profile (runtime.agent.profiles)
    account_revision: int
    session_id: str
    log: SessionLog
    clock: ConversationClock
    memory: SessionMemory | None
    turn_id: str
    step: int  # the first step this run makes
    attempts_before: int  # failed model calls of that step so far
    resuming: bool  # the step waits for a model retry: its start is logged already
    checked: _StepCheck | None  # the first step's check, as read with the turn's rows


@dataclass
class _Ran:
    """How a turn's steps ended."""

    outcome: Outcome = "error"
    paused: bool = False  # a human took over during the turn
    unavailable: bool = False  # the model stayed unavailable: the batch stays open
    archived_inline: bool = False
    model_calls: int = 0
    model_s: float = 0.0


def run_turn(
    store: DeliveryStore,
    provider: ModelProvider,
    customer_id: int,
    sessions_dir: Path,
    zone: ZoneInfo,
    agent: AgentSettings,
    on_registered: Callable[[str], None] = lambda request_id: None,
    attachments: AttachmentPolicy | None = None,
    memory_engine: MemoryEngine | None = None,
    fence: Fence | None = None,
    begin_attempt: Callable[[Connection, OutboxRequest, ReplyCheck], None] | None = None,
    fetch_images: Callable[[list[int]], object] | None = None,
    profile: AgentProfile | None = None,
) -> TurnResult | None:
    """Run the turn of the customer's open batch, if any, as the agent `profile` (its system
    prompt, provider and model, tools and memory switch; None: the default profile of `agent`,
    and `provider` is the profile's). The caller holds the writer lease;
    every write of the turn checks its `fence` and raises LeaseLost once it is gone (the first
    one, which reads what the turn needs, takes a `claimed` lease, or raises LeaseBusy).
    `begin_attempt`: see TurnBinding. `fetch_images`: fetches buyers' images of the batch not
    fetched yet (runtime.inbound.media), so that the turn shows them; one that stays unfetched
    reads `[image]`."""
    profile = profile or default_profile(agent)
    agent = profile.agent
    if memory_engine is not None:  # the engine is the process's; whether the model scores is the profile's
        memory_engine = replace(memory_engine, model_scores=profile.model_scores) if profile.memory else None
    turn = _open_turn(store, customer_id, sessions_dir, zone, profile, memory_engine, fence, fetch_images)
    if not isinstance(turn, _Turn):
        return turn
    binding = TurnBinding(
        store=store,
        customer=turn.customer,
        batch=turn.batch,
        session_id=turn.session_id,
        account_revision=turn.account_revision,
        zone=zone,
        turn_id=turn.turn_id,
        clock=turn.clock,
        attachments=attachments,
        on_registered=on_registered,
        memory=turn.memory,
        fence=fence,
        begin_attempt=begin_attempt,
        batch_logged=turn.batch.state == BatchState.CLAIMED,  # its turn/start is in the log by now
    )
    ran = _run_steps(store, provider, agent, zone, turn, binding)
    if isinstance(ran, TurnResult):
        return ran
    return _end_turn(store, fence, turn, binding, ran)


def _open_turn(
    store: DeliveryStore,
    customer_id: int,
    sessions_dir: Path,
    zone: ZoneInfo,
    profile: AgentProfile,
    memory_engine: MemoryEngine | None,
    fence: Fence | None,
    fetch_images: Callable[[list[int]], object] | None,
) -> _Turn | TurnResult | None:
    """Read what the turn needs in its first (fenced) write, open the session, and either go on
    with a step that waits for a model retry or start the turn in the log; a TurnResult when
    the batch does not run now (revoked, not due yet, or finished already)."""
    agent = profile.agent
    with fenced(store, fence) as conn:
        rows = turn_rows(conn, customer_id)
        if rows is None or rows.batch is None:
            return None
        customer, batch = rows.customer, rows.batch
        if customer.handling_paused or customer.handling_epoch != batch.handling_epoch:  # is_current, as read
            revoke_batch(conn, batch.id)
            return TurnResult(batch.id, "revoked", customer.session_id)
        if customer.session_id:
            known = KnownSession(customer.session_id, False, rows.session)
        else:
            header = begin_first_session(conn, customer_id, agent.model_name, profile.name)
            known = KnownSession(header.id, True, header)
        clock = conversation_clock(conn, customer_id)
        question = offer(conn, customer_id, batch.id) if rows.questions else None
    session = open_session(store, customer_id, sessions_dir, fence, known)
    memory = memory_engine.session(customer_id, clock) if memory_engine else None
    turn = _Turn(
        customer=customer,
        batch=batch,
        profile=profile,
        account_revision=rows.account.revision if rows.account else 0,
        session_id=session.session_id,
        log=session.log,
        clock=clock,
        memory=memory,
        turn_id="",
        step=0,
        attempts_before=0,
        resuming=False,
        checked=(True, rows.reads),  # the first step's, as read
    )
    waiting = waiting_for_model(session.log)
    if waiting is not None and waiting.batch_id != batch.id:  # cannot wait for a batch that is not open
        close_unfinished(session.log)
        waiting = None
    if waiting is None:
        return _start_turn(
            store, customer_id, sessions_dir, zone, agent, fence, fetch_images, session, turn, rows.lines, question
        )
    due_in_ms = (
        waiting.last_attempt_at + _backoff_s(agent.openai, waiting.attempts, waiting.retry_after_s) * 1000 - now_ms()
    )
    if due_in_ms > 0:  # asked early (new input, the reconciler): come back when it is due
        return TurnResult(batch.id, "waiting", turn.session_id, retry_after_s=due_in_ms / 1000)
    turn.turn_id, turn.step, turn.attempts_before, turn.resuming = waiting.turn_id, waiting.step, waiting.attempts, True
    return turn


def _start_turn(
    store: DeliveryStore,
    customer_id: int,
    sessions_dir: Path,
    zone: ZoneInfo,
    agent: AgentSettings,
    fence: Fence | None,
    fetch_images: Callable[[list[int]], object] | None,
    session: OpenSession,
    turn: _Turn,
    lines: list[RenderableMessage],
    question: PendingQuestion | None,
) -> _Turn | TurnResult:
    """Rotate the session if its end is due, mend what a crash left, and log the turn's start
    with its input (the batch's lines, or the note of a follow-up turn) and what memory
    recalls for it; a TurnResult when the log already holds the batch's finished turn."""
    batch, clock = turn.batch, turn.clock
    ending = rotation_due(session, batch.id, agent, now_ms(), turn.profile.name)
    if ending is not None:
        session = rotate(
            store, customer_id, sessions_dir, fence, ending, agent.model_name, turn.memory, session, turn.profile.name
        )
        turn.log, turn.session_id = session.log, session.session_id
    log = turn.log
    repair(log, recorded_sends(store, turn.session_id))
    if not log.of_type("system/message"):  # a new session (a fork of an empty one has its marker)
        note = DAMAGED_NOTE if session.replaced else rotated_note(session.header)
        prompt = _system_prompt(agent.persona)
        log.append("system/message", text=f"{prompt}\n\n{note}" if note else prompt)
    turns = batch_turns(log, batch.id)
    if _reconcile_session(store, turns, batch, fence, session.first):
        return TurnResult(batch.id, turns[-1][1] if turns else "complete", turn.session_id)  # type: ignore[arg-type]
    turn.turn_id = f"t{log.offset}"
    if turns:  # interrupted: exactly one follow-up turn per interruption
        log.append("turn/start", turn=turn.turn_id, batch_id=batch.id, kind="follow-up", follows=turns[-1][0].turn)
        log.append("user/message", source=batch.id, text=FOLLOW_UP_TEXT)
        return turn
    log.append("turn/start", turn=turn.turn_id, batch_id=batch.id, kind="batch")
    lines = with_fetched_images(store, lines, fetch_images)
    for n, (text, rendered) in enumerate(input_parts([shown(line, clock) for line in lines], zone)):
        if n == 0 and question is not None:
            text = f"{question_note(question, clock, zone)}\n{text}"
        images = stored_images(rendered)
        log.append("user/message", source=batch.id, text=text, **({"images": images} if images else {}))
    if turn.memory is not None:
        recall(log, turn.memory, turn.turn_id, _buyer_text(lines), _said_on(lines, clock, zone))
    return turn


def _run_steps(
    store: DeliveryStore,
    provider: ModelProvider,
    agent: AgentSettings,
    zone: ZoneInfo,
    turn: _Turn,
    binding: TurnBinding,
) -> _Ran | TurnResult:
    """The turn's steps: a model call, then the tools it asked for, until it answers without
    one, hands off, a human takes over, or the model stays unavailable; a TurnResult when a
    failed model call is to be tried again in a new run.

    Flush points, each an fsync: the turn's input and requested tool calls before any call
    starts (in one frame with the first start: nothing the turn did reached the buyer before,
    and a run cut short before it leaves no trace of the turn, which then runs again whole),
    each later start before it runs, a failed model call before the run ends to wait; the
    results and the steps after the last call are flushed with the turn's end (a crash before
    it loses only model calls, and the repair reads each started call's outcome from the
    outbox: runtime.agent.repair)."""
    log, memory, turn_id, customer_id = turn.log, turn.memory, turn.turn_id, turn.batch.customer_id
    offered = TOOLS | MEMORY_TOOLS if memory is not None else TOOLS
    available = {name: tool for name, tool in offered.items() if turn.profile.allows(name)}
    tools = [spec for spec, _ in available.values()]
    ran, step, resuming, attempts_before, checked = _Ran(), turn.step, turn.resuming, turn.attempts_before, turn.checked
    while step < agent.max_steps:
        if checked is None:
            with store.read() as conn:
                checked = _step_check(conn, customer_id, turn.batch.handling_epoch, not resuming)
        (current, reads), checked = checked, None
        if not current:
            if resuming:
                log.append("step/end", turn=turn_id, step=step)
            ran.outcome, ran.paused = "interrupted", True  # a human took over during the turn
            break
        task = judge_task(memory)
        if not resuming:
            log.append("step/start", turn=turn_id, step=step)
            _deliver_reads(store, log, reads, zone)
            if memory is not None:  # a step's tool output must not push the next call past the window
                inline = archive(log, turn.session_id, memory, memory.settings.emergency_percent, task)
                if inline.folders or inline.trimmed:  # new pending or review folders: a new task
                    ran.archived_inline, task = True, judge_task(memory)
        _note_request(log, agent.model_name, tools)
        began = time.monotonic()
        reply = _call_model(provider, log, tools, agent, store, step, task, attempts_before)
        ran.model_calls, ran.model_s = ran.model_calls + 1, ran.model_s + time.monotonic() - began
        resuming, attempts_before = False, 0
        if isinstance(reply, _RetryAfter):  # the batch stays open; the turn goes on in the next run
            _commit_if_logged(binding)
            return TurnResult(turn.batch.id, "waiting", turn.session_id, retry_after_s=reply.seconds)
        if reply is None:  # the batch stays open: the reconciler brings a follow-up turn later
            log.append("step/end", turn=turn_id, step=step)
            ran.outcome, ran.unavailable = "interrupted", True
            break
        log.append("assistant/message", text=reply.text, tool_calls=[c.model_dump() for c in reply.tool_calls],
                   usage=reply.usage)  # fmt: skip
        if not reply.tool_calls:
            log.append("step/end", turn=turn_id, step=step)
            ran.outcome = "complete"
            break
        handed_off = _run_tools(log, binding, reply, available)
        log.append("step/end", turn=turn_id, step=step)
        if binding.checked is not None and binding.checked[0] == reply.tool_calls[-1].id:
            checked = (True, binding.checked[1])  # the step's last call wrote after every other
        binding.checked = None
        if handed_off:  # the agent paused its own handling: a human answers from here
            ran.outcome = "complete"
            break
        step += 1
    return ran


def _run_tools(log: SessionLog, binding: TurnBinding, reply: AssistantReply, available: Tools) -> bool:
    """Run the step's tool calls in order, each start flushed before it runs; whether one of
    them ended the turn (a handoff)."""
    handed_off = False
    for call in reply.tool_calls:
        log.append("tool/call", call_id=call.id, name=call.name)
        log.flush()
        result = execute(binding, call, available)
        handed_off = handed_off or result.ends_turn
        log.append("tool/result", call_id=call.id, name=call.name, content=result.content,
                   is_error=result.is_error, request_id=result.request_id)  # fmt: skip
    return handed_off


def _end_turn(store: DeliveryStore, fence: Fence | None, turn: _Turn, binding: TurnBinding, ran: _Ran) -> TurnResult:
    """Log the turn's end, then commit what the log holds and finish (or revoke) the batch in
    the turn's last write; a batch whose model stayed unavailable stays open."""
    log, batch, memory = turn.log, turn.batch, turn.memory
    reason = "handling-paused" if ran.paused else "model-unavailable" if ran.unavailable else None
    log.append("turn/end", turn=turn.turn_id, outcome=ran.outcome, **({"reason": reason} if reason else {}))
    log.flush()
    admit_next = True
    if not ran.unavailable:
        with store.write() as conn:
            binding.commit_logged(conn)  # what the log holds is committed, even if a human took over since
            if ran.paused:
                revoke_batch(conn, batch.id)
                admit_next = not nothing_to_admit(conn, batch.customer_id)
            else:  # and input that came during the turn, read in the same statement
                admit_next = finish_batch(conn, batch.id, ran.model_calls, round(ran.model_s * 1000))
            if fence is not None:
                fence.check_and_release(conn)  # the turn's last write
    else:  # the batch stays open for a follow-up turn
        _commit_if_logged(binding)
    # Above the trigger, or folders archived inline that want scoring: the memory task follows.
    due = memory is not None and (
        ran.archived_inline or percent(view_tokens(log, judge_task(memory)), memory) > memory.settings.trigger_percent
    )
    return TurnResult(batch.id, ran.outcome, turn.session_id, archive_due=due, admit_next=admit_next)


def _note_request(log: SessionLog, model: str, tools: list[ToolSpec]) -> None:
    """Log what the next request is made with when it changed (`request/header`); when the
    tools changed since the session's last request (a setting changed between runs), tell the
    model first (`developer/message`), so it neither calls a tool that is gone nor ignores one."""
    names = [spec.name for spec in tools]
    last = log.last("request/header")
    if isinstance(last, RequestHeader) and last.model == model and last.tools == names:
        return
    if isinstance(last, RequestHeader) and last.tools != names:
        added = [n for n in names if n not in last.tools]
        removed = [n for n in last.tools if n not in names]
        parts = [f"新增：{', '.join(added)}" if added else "", f"已移除：{', '.join(removed)}" if removed else ""]
        text = "[kefu] 可用工具有变化（" + "；".join(p for p in parts if p) + "）。只调用现在可用的工具。"
        log.append("developer/message", text=text, added=added, removed=removed)
    log.append("request/header", model=model, tools=names)


def _commit_if_logged(binding: TurnBinding) -> None:
    """A run that ends with the batch still open (a model call to retry, a model unavailable):
    what its log holds is committed now, so a human taking over meanwhile finds the messages
    the agent saw committed, not suppressed."""
    if binding.batch_logged:
        with binding.write():
            pass


def _said_on(lines: list[RenderableMessage], clock: ConversationClock, zone: ZoneInfo) -> date | None:
    """The shop's day of a batch's last line, as the conversation reads it: what the buyer's
    昨天 or 上周五 is counted from (None for a time no calendar holds)."""
    if not lines:
        return None
    try:
        return datetime.fromtimestamp(shown(lines[-1], clock).received_at / 1000, zone).date()
    except (OverflowError, OSError, ValueError):
        return None


def _buyer_text(lines: list[RenderableMessage]) -> str:
    """What the buyer said in a batch: the query of the turn's recall (no labels or times)."""
    return "\n".join(
        content_text(m.content_type, m.body)
        for m in lines
        if m.sender_role not in ("human-console", "human-native", "ai")
    )
