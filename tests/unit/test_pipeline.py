"""Each pipeline step on its own (runtime.pipeline): a real SQLite store, a MockTransport for
the platform, no simulator and no broker. What a step returns as follow-up work is what the
shell dispatches, so these assertions pin the pipeline's control flow."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from config.retries import SEND_NOT_SUBMITTED
from runtime import pipeline
from runtime.admission.handling import pause_handling
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.session_log import SessionLog
from runtime.agent.sessions import session_path
from runtime.inbound.inbox import record_received
from runtime.inbound.ingest import ingest_page
from runtime.inbound.input_pause import pause_input
from runtime.inbound.pages import ConversationGroup, InboundMessage, InboundPage, Sender, TextContent
from runtime.outbox.manual import ManualSend, send_manual
from runtime.outbox.requests import load_request
from runtime.pipeline import Admit, Archive, Attempt, Ingest, RecordRead, RunTurn, Settle, Step
from runtime.ports import (
    AssistantReply,
    BuyerReadReceipt,
    ChatMessage,
    ModelError,
    NeverReceived,
    OutboundSend,
    SendFailure,
    SendReceipt,
    ToolSpec,
)
from runtime.store.clock import clock_at, now_ms
from tests.local_services import Local
from transports.mock import MockReadStatusTransport


def page(n: int, text: str = "什么时候发货？", buyer: str = "b1", age_s: float = 0) -> InboundPage:
    message = InboundMessage(
        platform_message_id=f"m{n}",
        sender=Sender(id=buyer, display_name="张三", role="buyer"),
        content=TextContent(text=text),
        occurred_at=datetime.now(UTC) - timedelta(seconds=age_s),
        direct_peer_id=buyer,
    )
    group = ConversationGroup(conversation_id=f"conv-{buyer}", conversation_type="direct", messages=[message])
    return InboundPage(account_id="shop", stream_id="mock", cursor=f"cursor-{n}", page_op_id=f"p{n}", groups=[group])


@pytest.fixture
def services(settings, store, shop) -> Local:
    return Local(settings, store)


def ingested(services: Local, n: int = 1, **kw) -> int:
    """A page received and ingested, its input not admitted yet; the id of its customer."""
    received = page(n, **kw)
    record_received(services.store, received)
    [customer_id] = ingest_page(services.store, received).customer_ids
    return customer_id


def turn(services: Local, customer_id: int) -> tuple[Step, list[pipeline.FollowUp]]:
    emitted: list[pipeline.FollowUp] = []
    return pipeline.turn(services, customer_id, emitted.append), emitted


def test_receive_records_the_page_and_asks_for_its_ingest_once(services):
    received = page(1)
    assert pipeline.receive(services, received) == Step("received", (Ingest(received.model_dump(mode="json")),))
    pipeline.ingest(services, received.model_dump(mode="json"))
    assert pipeline.receive(services, received) == Step("already-received")


def test_receive_read_hands_the_receipt_on_as_json():
    receipt = BuyerReadReceipt(
        account_id="shop", conversation_id="c", platform_message_id="m", reader_id="b1", read_at=datetime.now(UTC)
    )
    assert pipeline.receive_read(receipt) == Step("received", (RecordRead(receipt.model_dump(mode="json")),))


def test_ingest_admits_each_customer_in_its_transaction_confirms_the_page_and_a_replay_admits_again(services):
    received = page(1)
    first = pipeline.ingest(services, received.model_dump(mode="json"))
    assert first.outcome == "ingested" and len(first.follow_ups) == 1
    (turn,) = first.follow_ups
    assert isinstance(turn, RunTurn)  # admitted in the page's own transaction: its turn is due
    with services.store.read() as conn:
        assert conn.execute("SELECT state FROM admission_batch").scalars().all() == ["claimed"]
    assert services.transport.confirmed == ["cursor-1"]
    again = pipeline.ingest(services, received.model_dump(mode="json"))
    # Admission is idempotent: asking again is safe (the process that committed the page may
    # have died before its turn was published).
    assert again == Step("replayed", (Admit(turn.customer_id),))
    assert pipeline.admit(services, turn.customer_id) == Step("open-batch", (RunTurn(turn.customer_id),))


def test_ingest_rejects_a_malformed_page_and_holds_one_while_input_is_paused(services):
    broken = {**page(1).model_dump(mode="json"), "groups": "not a list"}
    assert pipeline.ingest(services, broken) == Step("rejected")
    pause_input(services.store)
    assert pipeline.ingest(services, page(2).model_dump(mode="json")) == Step("held")
    assert services.transport.confirmed == []


def test_admit_claims_a_batch_as_a_turn_to_run(services):
    customer_id = ingested(services)
    assert pipeline.admit(services, customer_id) == Step("admitted", (RunTurn(customer_id),))
    assert pipeline.admit(services, customer_id) == Step("open-batch", (RunTurn(customer_id),))


def test_admit_with_nothing_pending_has_no_follow_up(services):
    customer_id = ingested(services)
    pipeline.admit(services, customer_id)
    turn(services, customer_id)
    assert pipeline.admit(services, customer_id) == Step("nothing-pending")


def test_a_turn_emits_each_reply_as_an_attempt_and_ends_without_admission_when_nothing_waits(services):
    customer_id = ingested(services)
    pipeline.admit(services, customer_id)
    step, emitted = turn(services, customer_id)
    assert step == Step("complete")  # its last write found no input waiting: no admission to run
    [reply] = emitted
    assert isinstance(reply, Attempt) and (reply.countdown_s, reply.retries) == (0, 0)
    with services.store.read() as conn:
        assert load_request(conn, reply.request_id).state == "pending"  # registered, not sent: that is deliver's job
    assert services.transport.sent == []
    assert turn(services, customer_id) == (Step("no-open-batch"), [])


def test_a_turn_that_sends_here_begins_each_reply_in_its_registration_and_the_attempt_only_sends(services):
    customer_id = ingested(services)
    pipeline.admit(services, customer_id)
    emitted: list[pipeline.FollowUp] = []
    assert pipeline.turn(services, customer_id, emitted.append, sends_here=True) == Step("complete")
    [reply] = emitted
    assert isinstance(reply, Attempt) and reply.begun is not None and reply.begun.attempt_no == 1
    with services.store.read() as conn:  # begun durably before any platform call, with the intent
        assert load_request(conn, reply.request_id).state == "sending"
        assert conn.execute("SELECT state FROM outbox_attempt").scalars().all() == ["started"]
    assert services.transport.sent == []
    assert pipeline.deliver(services, reply.request_id, begun=reply.begun) == Step("sent")
    assert [s.request_id for s in services.transport.sent] == [reply.request_id]
    assert pipeline.deliver(services, reply.request_id) == Step("settled")


def test_a_reply_begun_at_registration_whose_worker_died_is_never_sent_blindly(services, monkeypatch):
    customer_id = ingested(services)
    pipeline.admit(services, customer_id)
    emitted: list[pipeline.FollowUp] = []
    pipeline.turn(services, customer_id, emitted.append, sends_here=True)  # the attempt never runs
    [reply] = emitted
    assert pipeline.deliver(services, reply.request_id) == Step("in-progress")  # its lease still runs
    later = now_ms() + int(services.settings.outbox.attempt_lease_s * 1000) + 1
    with clock_at(later):  # the attempt's lease has lapsed
        assert pipeline.deliver(services, reply.request_id).outcome == "result-unknown"  # settled by evidence
    assert services.transport.sent == []


def test_a_reply_is_not_begun_at_registration_when_no_transport_serves_its_account(services, monkeypatch):
    customer_id = ingested(services)
    pipeline.admit(services, customer_id)

    def no_transport(account_id: str):
        raise pipeline.KefuError("KEFU_TRANSPORT_UNAVAILABLE", "no transport")

    monkeypatch.setattr(services, "transport_of", no_transport)
    emitted: list[pipeline.FollowUp] = []
    assert pipeline.turn(services, customer_id, emitted.append, sends_here=True) == Step("complete")
    [reply] = emitted
    assert reply.begun is None
    with services.store.read() as conn:
        assert load_request(conn, reply.request_id).state == "pending"  # the attempt, run apart, says why


def test_input_that_came_during_a_turn_is_admitted_after_it(services):
    customer_id = ingested(services)
    pipeline.admit(services, customer_id)
    assert ingested(services, 2, text="还有别的颜色吗？") == customer_id  # waits: the batch is open
    step, _ = turn(services, customer_id)
    assert step == Step("complete", (Admit(customer_id),))
    assert pipeline.admit(services, customer_id) == Step("admitted", (RunTurn(customer_id),))


def test_a_turn_above_the_memory_trigger_asks_for_an_archive(services, monkeypatch):
    real = pipeline.run_turn  # the memory engine's trigger is runtime.memory.engine's to test
    monkeypatch.setattr(pipeline, "run_turn", lambda *a, **kw: replace(real(*a, **kw), archive_due=True))
    customer_id = ingested(services)
    pipeline.admit(services, customer_id)
    step, _ = turn(services, customer_id)
    assert step.follow_ups == (Archive(customer_id),)


def test_a_turn_whose_customer_lease_is_held_elsewhere_does_nothing(services):
    from runtime.store import leases

    customer_id = ingested(services)
    pipeline.admit(services, customer_id)
    with leases.held(services.store, f"customer:{customer_id}", 60) as fence:
        assert fence is not None
        assert turn(services, customer_id) == (Step("busy"), [])


def manual(services: Local, customer_id: int, *request_ids: str) -> None:
    for request_id in request_ids:
        send_manual(services.store, ManualSend(request_id=request_id, customer_id=customer_id, text="您好"))


def test_deliver_sends_then_starts_the_next_request_in_order(services):
    customer_id = ingested(services)
    manual(services, customer_id, "op-1", "op-2")
    assert pipeline.deliver(services, "op-2") == Step("waiting-for-earlier")
    assert pipeline.deliver(services, "op-1") == Step("sent", (Attempt("op-2"),))
    assert pipeline.deliver(services, "op-2") == Step("sent")
    assert [s.request_id for s in services.transport.sent] == ["op-1", "op-2"]
    assert pipeline.deliver(services, "op-1") == Step("settled")  # a repeated task sends nothing
    assert pipeline.deliver(services, "nope") == Step("unknown-request")


def not_taken(hint: float | None):
    def handler(send: OutboundSend) -> SendReceipt:
        raise SendFailure("not-submitted", "THROTTLED", retry_after_s=hint)

    return handler


def test_deliver_backs_off_a_send_the_platform_did_not_take_honouring_its_hint(services):
    customer_id = ingested(services)
    manual(services, customer_id, "op-1", "op-2")
    services.transport.handler = not_taken(7)
    assert pipeline.deliver(services, "op-1") == Step("not-submitted", (Attempt("op-1", 7, 1),))
    services.transport.handler = not_taken(None)
    assert pipeline.deliver(services, "op-1", retries=2) == Step("not-submitted", (Attempt("op-1", 5, 3),))
    last = SEND_NOT_SUBMITTED.retries  # backoff spent: the reconciler's grace takes over
    assert pipeline.deliver(services, "op-1", retries=last) == Step("not-submitted")


def test_deliver_settles_a_send_of_unknown_outcome_instead_of_sending_again(services):
    customer_id = ingested(services)
    manual(services, customer_id, "op-1")

    def times_out(send: OutboundSend) -> SendReceipt:
        raise TimeoutError

    services.transport.handler = times_out
    assert pipeline.deliver(services, "op-1") == Step("result-unknown", (Settle("op-1"),))
    assert pipeline.deliver(services, "op-1") == Step("result-unknown")  # skipped: never a second submit
    assert len(services.transport.sent) == 1


def unknown_request(services: Local) -> str:
    customer_id = ingested(services)
    manual(services, customer_id, "op-1")
    services.transport.handler = lambda send: (_ for _ in ()).throw(SendFailure("unknown", "TIMEOUT"))
    pipeline.deliver(services, "op-1")
    return "op-1"


def test_settle_by_receipt_found_or_not_yet_known(services):
    request_id = unknown_request(services)
    assert pipeline.settle(services, request_id) == Step("still-unknown")
    services.transport.lookup = lambda rid: SendReceipt(platform_message_id="pm-1")
    assert pipeline.settle(services, request_id) == Step("settled")
    assert pipeline.settle(services, request_id) == Step("not-unknown")


def test_settle_a_send_the_platform_never_received_attempts_it_again(services):
    request_id = unknown_request(services)
    services.transport.lookup = lambda rid: NeverReceived()
    assert pipeline.settle(services, request_id) == Step("not-unknown")  # the attempt may still arrive
    with services.store.write() as conn:  # the attempt is older than its lease now
        conn.execute("UPDATE outbox_attempt SET started_at = started_at - 3600000")
    assert pipeline.settle(services, request_id) == Step("never-received", (Attempt(request_id),))


def without_grace(services: Local) -> None:
    reconcile = services.settings.reconcile.model_copy(update={"grace_s": 0})
    services.settings = services.settings.model_copy(update={"reconcile": reconcile})


def test_reconcile_rederives_lost_admissions_and_ingests_from_sqlite(services):
    without_grace(services)
    customer_id = ingested(services)  # pending input, never admitted (its broker message was lost)
    with services.store.write() as conn:
        conn.execute("UPDATE inbound_message SET received_at = received_at - 1000")
    lost = page(2, buyer="b2")
    record_received(services.store, lost)  # received, its ingest message lost
    step = pipeline.reconcile(services)
    assert step.follow_ups == (Admit(customer_id), Ingest(lost.model_dump(mode="json")))
    assert step.outcome == "1 admissions, 0 turns, 0 attempts, 0 settlements, 0 media, 1 received pages, 0 pages"


def test_reconcile_catches_up_a_page_served_while_no_listener_ran(services):
    missed, fresh = page(1, age_s=60), page(2, buyer="b2")
    services.transport.pages = [fresh]
    assert pipeline.reconcile(services).follow_ups == ()  # not overdue yet: a listener may still bring it
    services.transport.pages = [missed]
    assert pipeline.reconcile(services).follow_ups == (Ingest(missed.model_dump(mode="json")),)
    assert pipeline.reconcile(services).follow_ups == ()  # recorded: its ingest is on its way


def test_reconcile_asks_for_overdue_turns_attempts_and_settlements(services):
    without_grace(services)
    customer_id = ingested(services)
    pipeline.admit(services, customer_id)
    manual(services, customer_id, "op-1")
    with services.store.write() as conn:  # both left alone for longer than the grace
        conn.execute("UPDATE admission_batch SET updated_at = updated_at - 1000")
        conn.execute("UPDATE outbox_request SET updated_at = updated_at - 1000")
    follow_ups = pipeline.reconcile(services).follow_ups
    assert RunTurn(customer_id) in follow_ups and Attempt("op-1") in follow_ups
    services.transport.handler = lambda send: (_ for _ in ()).throw(SendFailure("unknown", "TIMEOUT"))
    pipeline.deliver(services, "op-1")
    assert Settle("op-1") in pipeline.reconcile(services).follow_ups


def test_a_starting_worker_reconciles_with_no_grace_what_a_dead_one_had_taken(services):
    """The dead worker had taken the turn's broker message without beginning it: no lease lapsed
    for the rescue to see, and Redis hands the message back only after its visibility timeout."""
    customer_id = ingested(services)
    pipeline.admit(services, customer_id)
    with services.store.write() as conn:  # claimed a moment ago, well within the 30 s grace
        conn.execute("UPDATE admission_batch SET updated_at = updated_at - 50")
    assert RunTurn(customer_id) not in pipeline.reconcile(services).follow_ups
    assert pipeline.rescue(services).follow_ups == ()
    assert RunTurn(customer_id) in pipeline.reconcile(services, grace_s=0).follow_ups


def test_check_reads_stores_a_read_found_by_a_read_status_query(services):
    reading = MockReadStatusTransport(readers=lambda message_id: {"b1": 1_700_000_000_000}, schedule=(2, 0))
    services.transport = reading
    customer_id = ingested(services)
    manual(services, customer_id, "op-1")
    pipeline.deliver(services, "op-1")
    assert pipeline.check_reads(services) == Step("1 reads")
    assert pipeline.check_reads(services) == Step("0 reads")  # the schedule ended with the read


def test_record_read_names_a_bad_field_and_stores_a_good_receipt_once(services):
    assert pipeline.record_read(services, {"account_id": "shop"}) == Step("invalid")
    customer_id = ingested(services)
    manual(services, customer_id, "op-1")
    pipeline.deliver(services, "op-1")
    receipt = {
        "account_id": "shop",
        "conversation_id": "conv-b1",
        "platform_message_id": "mock-op-1",
        "reader_id": "b1",
        "read_at": datetime.now(UTC).isoformat(),
    }
    assert pipeline.record_read(services, receipt) == Step("stored")
    assert pipeline.record_read(services, receipt) == Step("already-stored")


def test_resume_ingests_held_pages_and_admits_kept_customers(services):
    pause_input(services.store)
    held = page(1)
    pipeline.ingest(services, held.model_dump(mode="json"))
    assert pipeline.resume(services.store, None).follow_ups == (Ingest(held.model_dump(mode="json")),)


class FlakyModel:
    """Fails its first calls with a transient error (a rate limit), then answers like the
    rules agent; records the messages of every call."""

    name = "flaky"

    def __init__(self, failures: int, retry_after_s: float | None = None) -> None:
        self.failures = failures
        self.retry_after_s = retry_after_s  # what the rate limit says about coming back
        self.seen: list[list[ChatMessage]] = []
        self.rules = RulesProvider(load_knowledge(None))

    def complete(self, messages: list[ChatMessage], tools: list[ToolSpec]) -> AssistantReply:
        self.seen.append(messages)
        if len(self.seen) <= self.failures:
            raise ModelError("MODEL_HTTP_429", transient=True, status=429, retry_after_s=self.retry_after_s)
        return self.rules.complete(messages, tools)


def with_model(services: Local, model: FlakyModel, backoff_s: float) -> None:
    openai = services.settings.agent.openai.model_copy(update={"retry_backoff_s": backoff_s, "max_attempts": 3})
    agent = services.settings.agent.model_copy(update={"openai": openai})
    services.settings = services.settings.model_copy(update={"agent": agent})
    services.provider = model


def test_a_failed_model_call_ends_the_run_and_the_next_run_goes_on_with_the_same_step(services):
    model = FlakyModel(failures=1)
    with_model(services, model, backoff_s=0)
    customer_id = ingested(services)
    pipeline.admit(services, customer_id)
    first, emitted = turn(services, customer_id)
    assert first == Step("waiting", (RunTurn(customer_id, 0.0),)) and emitted == []  # no worker sleeps
    second, emitted = turn(services, customer_id)
    assert second == Step("complete") and len(emitted) == 1
    assert model.seen[0] == model.seen[1]  # the retried call saw exactly what the failed one saw
    events = SessionLog(session_path(services.settings.sessions_dir, f"s{customer_id}-1")).load()
    kinds = [e.type for e in events if e.type in ("turn/start", "step/start", "assistant/attempt", "turn/end")]
    assert kinds == ["turn/start", "step/start", "assistant/attempt", "step/start", "turn/end"]  # one turn


def test_a_turn_asked_again_before_its_backoff_waits_for_the_rest_of_it(services):
    with_model(services, FlakyModel(failures=1), backoff_s=30)
    customer_id = ingested(services)
    pipeline.admit(services, customer_id)
    turn(services, customer_id)
    early, _ = turn(services, customer_id)  # new input, or the reconciler, asked early
    [again] = early.follow_ups
    assert early.outcome == "waiting" and isinstance(again, RunTurn) and 25 < again.countdown_s <= 30
    assert len(services.provider.seen) == 1  # no second call before the backoff


def test_a_rate_limits_retry_after_longer_than_the_backoff_is_waited_out_even_when_asked_early(services):
    with_model(services, FlakyModel(failures=1, retry_after_s=20), backoff_s=1)
    customer_id = ingested(services)
    pipeline.admit(services, customer_id)
    first, _ = turn(services, customer_id)
    [later] = first.follow_ups
    assert first.outcome == "waiting" and isinstance(later, RunTurn) and later.countdown_s == 20
    early, _ = turn(services, customer_id)  # past the backoff, not past the provider's word
    [again] = early.follow_ups
    assert early.outcome == "waiting" and isinstance(again, RunTurn) and 15 < again.countdown_s <= 20
    assert len(services.provider.seen) == 1


def test_a_human_taking_over_while_a_turn_waits_ends_it_without_a_call(services):
    with_model(services, FlakyModel(failures=1), backoff_s=0)
    customer_id = ingested(services)
    pipeline.admit(services, customer_id)
    turn(services, customer_id)
    pause_handling(services.store, customer_id, "operator")
    assert turn(services, customer_id)[0].outcome in ("interrupted", "revoked")
    assert len(services.provider.seen) == 1


def test_a_reply_begun_at_registration_still_waits_for_an_earlier_send_of_its_customer(services):
    from runtime.outbox.manual import ManualSend, send_manual

    customer_id = ingested(services)
    pipeline.admit(services, customer_id)
    send_manual(services.store, ManualSend(request_id="op-1", customer_id=customer_id, text="稍等"))  # not sent yet
    emitted: list[pipeline.FollowUp] = []
    assert pipeline.turn(services, customer_id, emitted.append, sends_here=True) == Step("complete")
    [reply] = emitted
    assert reply.begun is None  # replies reach a customer in registration order
    with services.store.read() as conn:
        assert load_request(conn, reply.request_id).state == "pending"
        assert conn.execute("SELECT count(*) FROM outbox_attempt").scalar_one() == 0


def test_a_reply_whose_route_changed_since_admission_is_not_begun_at_registration(services):
    from runtime.admission.routes import RouteChanges, current_revision, update_route

    customer_id = ingested(services)
    pipeline.admit(services, customer_id)  # the batch is admitted under the route's generation 1
    revision = current_revision(services.store, "all-direct")
    update_route(services.store, "all-direct", revision, RouteChanges(enabled=False), op_id="op-off")
    emitted: list[pipeline.FollowUp] = []
    pipeline.turn(services, customer_id, emitted.append, sends_here=True)
    with services.store.read() as conn:
        states = conn.execute("SELECT state FROM outbox_request").scalars().all()
        assert conn.execute("SELECT count(*) FROM outbox_attempt").scalar_one() == 0
    assert states == ["route-changed"]  # registered (the log holds the call), never begun, never sent
    assert services.transport.sent == []
