"""Simulation batches (`kefu simulate batch`, and `kefu demo`): scripted buyers talk to the agent
under test through the real pipeline (the simulator platform, a worker's listener, ingest,
admission, turns, the outbox), many conversations at once, and a report of what each got back.

A conversation says one step, waits until the store shows the step handled (stored, and its
turn and replies settled, or the agent handed off), then says the next, as a buyer waiting for
an answer would. Replies are tied to the step whose message their batch took last, through
the store, never by timing; expectations are checked on that at the end.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel
from rich.console import Console

from config import Settings
from runtime.accounts.registry import AccountSpec, create_account, load_account
from runtime.admission.routes import RouteSpec, create_route, list_routes
from runtime.errors import KefuError
from runtime.outbox.report import ConversationOutcome, conversation_outcome
from runtime.store import DeliveryStore
from transports.simulator import SimulatedPlatform
from transports.simulator.script import Script, ScriptClock, ScriptedConversation, Step
from transports.simulator.transport import message_ids
from worker.process import WorkerProcess
from worker.sample_shop import SAMPLE_SHOP

POLL_S = 0.05


class Check(BaseModel):
    step: int  # 1-based
    expectation: str
    passed: bool


class ConversationResult(BaseModel):
    name: str
    buyer: str
    group: str | None
    steps: int
    replies: int
    handed_off: bool
    result_unknown: int
    first_reply_ms: int | None  # real time from the first message to the first reply on the platform
    checks: list[Check]
    error: str | None = None  # stopped, or a step that was never handled

    @property
    def passed(self) -> bool:
        return self.error is None and all(check.passed for check in self.checks)


class BatchReport(BaseModel):
    conversations: list[ConversationResult]  # in the script's order
    seconds: float

    @property
    def per_minute(self) -> float:
        return 60 * len(self.conversations) / self.seconds if self.seconds else 0.0

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.conversations)


def ensure_sample_shop(store: DeliveryStore, account_id: str = SAMPLE_SHOP) -> None:
    """The simulator account a batch talks to, with a route for direct conversations and one for
    groups that answers when mentioned (created once; an existing simulator account is used as it
    is, and a real account is refused: a simulation never touches one)."""
    with store.read() as conn:
        existing = load_account(conn, account_id)
    if existing is None:
        create_account(store, AccountSpec(id=account_id, platform="simulator", identity=f"{account_id}-seller"))
    elif not existing.simulated:
        raise KefuError(
            "KEFU_SIMULATION_REAL_ACCOUNT",
            f"account {account_id!r} is a real {existing.platform} account",
            "simulate on a simulator account (the default sim-shop is made for you)",
        )
    routes = list_routes(store, account_id)
    have = {route.id for route in routes}
    covered = {route.conversation_type for route in routes if route.target == "all"}  # by the operator's own
    for spec in (
        RouteSpec(id=f"{account_id}-direct", account_id=account_id, conversation_type="direct"),
        RouteSpec(id=f"{account_id}-groups", account_id=account_id, conversation_type="group", trigger_mention=True),
    ):
        if spec.id not in have and spec.conversation_type not in covered:
            create_route(store, spec, f"{spec.id}-setup")


@dataclass
class Simulation:
    """One batch run against one account: the store it reads, the platform it talks through."""

    store: DeliveryStore
    platform: SimulatedPlatform
    account_id: str
    script: Script
    step_timeout_s: float = 30.0
    run: str = field(default_factory=lambda: f"{datetime.now():%m%d%H%M%S}{uuid.uuid4().hex[:4]}-")  # keeps runs apart
    on_step: Callable[[ScriptedConversation, Step, list[str]], None] | None = None  # with the step's new replies
    stopping: threading.Event = field(default_factory=threading.Event)

    def run_batch(self, concurrency: int) -> BatchReport:
        """Every conversation, at most `concurrency` at once; results in the script's order.
        Ctrl-C stops it cleanly: conversations not begun are left out, running ones end after
        their current step."""
        started = time.monotonic()
        results: list[ConversationResult] = []
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="kefu-sim") as pool:
            futures = [pool.submit(self._guarded, spec) for spec in self.script.conversations]
            try:
                results = [future.result() for future in futures]
            except KeyboardInterrupt:
                self.stopping.set()
                for future in futures:
                    future.cancel()
                results = [f.result() for f in futures if not f.cancelled()]
        return BatchReport(conversations=results, seconds=time.monotonic() - started)

    def _guarded(self, spec: ScriptedConversation) -> ConversationResult:
        """One conversation; an error ends it alone, named in its result (the batch goes on)."""
        try:
            return self.conversation(spec)
        except Exception as error:  # noqa: BLE001 - reported per conversation, never swallowed
            group = spec.group.id if spec.group else None
            return ConversationResult(
                name=spec.name, buyer=spec.buyer.id, group=group, steps=0, replies=0, handed_off=False,
                result_unknown=0, first_reply_ms=None, checks=[], error=f"{type(error).__name__}: {error}",
            )  # fmt: skip

    def conversation(self, spec: ScriptedConversation) -> ConversationResult:
        clock = ScriptClock(spec.start or self.script.start)
        buyer = f"{self.run}{spec.buyer.id}"
        group = f"{self.run}{spec.group.id}" if spec.group else None
        conversation_id = self.platform.group_conversation(group) if group else self.platform.conversation_for(buyer)
        said: list[list[str]] = []
        handed_off_after: list[bool] = []
        first_said_ms: int | None = None
        error = None
        for number, step in enumerate(spec.steps, 1):
            if self.stopping.is_set():
                error = f"stopped before step {number}"
                break
            if step.at is not None:
                clock.advance(step.at)
            if step.read:
                self.platform.buyer_reads(conversation_id, clock.now_ms())
            message = self.platform.buyer_says(
                self.account_id,
                buyer,
                spec.buyer.name,
                step.say,
                group=group,
                group_title=spec.group.title if spec.group else None,
                mention=step.mention,
                media=self.script.media(step),
                at_ms=clock.now_ms(),
            )
            first_said_ms = first_said_ms or int(time.time() * 1000)
            said.append(message_ids(message))
            if not step.wait:
                handed_off_after.append(False)
                if self.on_step is not None:
                    self.on_step(spec, step, [])
                continue
            replies_before = len(self._sent(conversation_id))
            outcome = self._wait(conversation_id, said[-1], _wants_reply(step, group))
            if outcome is None:
                stopped = self.stopping.is_set()
                error = (
                    f"stopped at step {number}"
                    if stopped
                    else f"step {number} not handled within {self.step_timeout_s:g}s"
                )
                break
            handed_off_after.append(outcome.handed_off)
            if self.on_step is not None:
                self.on_step(spec, step, [s.text for s in self._sent(conversation_id)[replies_before:]])
        last = spec.steps[len(said) - 1] if said else None
        trailing = said[-1] if last is not None and not last.wait else []  # a burst at the end: its replies
        wanted = last is not None and bool(trailing) and _wants_reply(last, group)
        final = self._wait(conversation_id, trailing, wanted) or conversation_outcome(
            self.store, self.account_id, conversation_id
        )
        return self._result(spec, buyer, group, conversation_id, said, handed_off_after, final, first_said_ms, error)

    def _sent(self, conversation_id: str) -> list[_Sent]:
        return [_Sent(s.client_ref, s.text, s.received_at) for s in self.platform.received_in(conversation_id)]

    def _wait(self, conversation_id: str, ids: list[str], reply: bool) -> ConversationOutcome | None:
        return wait_handled(
            self.store, self.account_id, conversation_id, ids, reply, self.step_timeout_s, self.stopping
        )

    def _result(
        self,
        spec: ScriptedConversation,
        buyer: str,
        group: str | None,
        conversation_id: str,
        said: list[list[str]],
        handed_off_after: list[bool],
        outcome: ConversationOutcome,
        first_said_ms: int | None,
        error: str | None,
    ) -> ConversationResult:
        sent = {s.request_id: s for s in self._sent(conversation_id)}
        replies = _replies_by_step(said, outcome, sent)
        checks = [  # the steps that were handled (a step that timed out ends the conversation: `error`)
            check
            for number, (step, texts, handed_off) in enumerate(
                zip(spec.steps, replies, handed_off_after, strict=False), 1
            )
            for check in _checks(number, step, texts, handed_off, group)
        ]
        first = min((s.at_ms for s in sent.values()), default=None)
        return ConversationResult(
            name=spec.name,
            buyer=buyer,
            group=group,
            steps=len(said),
            replies=len(sent),
            handed_off=outcome.handed_off,
            result_unknown=sum(state == "result-unknown" for state in outcome.states.values()),
            first_reply_ms=first - first_said_ms if first is not None and first_said_ms is not None else None,
            checks=checks,
            error=error,
        )


def wait_handled(
    store: DeliveryStore,
    account_id: str,
    conversation_id: str,
    ids: list[str],
    reply: bool,
    timeout_s: float,
    stopping: threading.Event | None = None,
) -> ConversationOutcome | None:
    """The conversation's outcome once these messages are stored and handled: settled, and,
    when a reply is wanted, taken by a batch (or the agent handed off). None on timeout, or
    as soon as `stopping` is set."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not (stopping is not None and stopping.is_set()):
        outcome = conversation_outcome(store, account_id, conversation_id)
        stored = all(i in outcome.stored for i in ids)
        taken = not reply or outcome.handed_off or any(i in outcome.batch_of for i in ids)
        if stored and taken and outcome.settled:
            return outcome
        time.sleep(POLL_S)
    return None


@dataclass(frozen=True)
class _Sent:
    request_id: str
    text: str
    at_ms: int


def _wants_reply(step: Step, group: str | None) -> bool:
    if step.expect.reply is not None:
        return step.expect.reply
    return group is None or step.mention


def _replies_by_step(said: list[list[str]], outcome: ConversationOutcome, sent: dict[str, _Sent]) -> list[list[str]]:
    """Each step's reply texts: a batch's replies go to the latest step it took a message of."""
    last_step_of: dict[str, int] = {}
    for number, ids in enumerate(said):
        for message_id in ids:
            batch = outcome.batch_of.get(message_id)
            if batch is not None:
                last_step_of[batch] = number
    replies: list[list[str]] = [[] for _ in said]
    for batch, number in last_step_of.items():
        replies[number] += [sent[r].text for r in outcome.requests_of.get(batch, []) if r in sent]
    return replies


def _checks(number: int, step: Step, texts: list[str], handed_off: bool, group: str | None) -> list[Check]:
    joined = "\n".join(texts)
    expect = step.expect
    checks = [Check(step=number, expectation=f"contains {w!r}", passed=w in joined) for w in expect.contains]
    checks += [Check(step=number, expectation=f"lacks {w!r}", passed=w not in joined) for w in expect.not_contains]
    if expect.reply is not None or (group is not None and not step.mention):
        wanted = _wants_reply(step, group)
        checks.append(Check(step=number, expectation="replied" if wanted else "no reply", passed=bool(texts) == wanted))
    if expect.handoff is not None:
        label = "handed off" if expect.handoff else "not handed off"
        checks.append(Check(step=number, expectation=label, passed=handed_off == expect.handoff))
    return checks


def run_script(
    settings: Settings,
    script: Script,
    account_id: str,
    concurrency: int,
    step_timeout_s: float,
    start_worker: bool,
    console: Console,
) -> BatchReport:
    """A batch on the configured data dir: the account made if missing, and a worker (with its
    listeners and beat) started for the run unless `start_worker` is false (workers the
    operator runs serve the shard)."""
    store = DeliveryStore(settings.delivery_path, settings.delivery)
    ensure_sample_shop(store, account_id)
    simulation = Simulation(store, SimulatedPlatform(settings.simulator_path), account_id, script, step_timeout_s)
    if not start_worker:
        return simulation.run_batch(concurrency)
    env = {"KEFU_DATA_DIR": str(settings.data_dir), "KEFU_BROKER_URL": settings.broker_url}
    with serving(settings, env, settings.data_dir / "simulate-worker.log", console):
        return simulation.run_batch(concurrency)


@contextmanager
def serving(settings: Settings, env: dict[str, str], log: Path, console: Console) -> Iterator[None]:
    """A worker with its listeners and beat for the block (the environment's settings on top)."""
    from worker.cli.common import _  # the words of the command that asked (kefu simulate, kefu demo)

    console.print("[dim]" + _("starting a worker for the run (log {path})").format(path=log) + "[/dim]", soft_wrap=True)
    worker = WorkerProcess(env, log, listen=True).start()
    try:
        from worker.celery_app import make_app  # importing it builds the app: a command needs none before

        worker.wait_ready(make_app(settings))
        yield
    finally:
        worker.stop()
