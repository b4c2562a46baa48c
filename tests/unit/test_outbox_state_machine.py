"""A hypothesis state machine over the outbox: any interleaving of register, begin, worker
death, task redelivery, provider outcomes, receipt query, echo, confirm, retry and pause never
submits one request id twice, never loses an intent, and ends every request settled or unknown.

It drives the real runtime functions against a real SQLite store and the simulator's ledger;
only the provider's answer (accepted, refused, timed out) is chosen by hypothesis.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, invariant, rule

from config import load_settings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.batches import evaluate, open_batch
from runtime.admission.handling import pause_handling, resume_handling
from runtime.admission.routes import RouteSpec, create_route
from runtime.errors import KefuError
from runtime.inbound.ingest import ingest_page
from runtime.outbox.manual import ManualSend, retry_manual, send_manual
from runtime.outbox.requests import (
    AttemptGrant,
    begin_attempt,
    confirm_result,
    load_request,
    record_failure,
    record_sent,
    register_outbound,
    settle_by_receipt,
)
from runtime.ports import SendFailure
from runtime.store import DeliveryStore
from runtime.store.states import SETTLED
from runtime.store.tables import OutboundIntent
from transports.simulator import SimulatedPlatform, SimulatorTransport

FATES = (
    "accepted",
    "not-submitted",
    "rejected",
    "timeout-after-submit",
    "timeout-before-submit",
    "dies-before-call",
    "dies-after-submit",
)
REACHES = ("accepted", "timeout-after-submit", "dies-after-submit")
STATES = {*SETTLED, "pending", "sending", "result-unknown"}
LEASE_HELD, LEASE_EXPIRED = 3600.0, -1.0  # -1: every started attempt is past its lease


class OutboxMachine(RuleBasedStateMachine):
    slow_calls = Bundle("slow_calls")

    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="kefu-outbox-sm-"))
        config = load_settings(data_dir=self.folder)
        self.store = DeliveryStore(config.delivery_path, config.delivery)
        self.platform = SimulatedPlatform(config.simulator_path)
        self.transport = SimulatorTransport(self.platform)
        create_account(self.store, AccountSpec(id="shop", platform="simulator", identity="seller"))
        create_route(self.store, RouteSpec(id="all", account_id="shop", conversation_type="direct"), op_id="op-route")
        self.customers: list[int] = []
        for buyer in ("b1", "b2"):
            page = self.transport.page_of("shop", [self.platform.buyer_says("shop", buyer, buyer, "在吗")])
            self.customers.append(ingest_page(self.store, page).customer_ids[0])
        self.registered: set[str] = set()
        self.ever_sent: set[str] = set()
        self.counter = 0

    def teardown(self) -> None:
        try:
            self._drain()
            for request_id in self.registered:
                state = self._request(request_id).state
                assert state in (*SETTLED, "result-unknown"), (request_id, state)
            self.no_double_submission()
        finally:
            self.store.close()
            shutil.rmtree(self.folder, ignore_errors=True)

    # -- helpers -------------------------------------------------------------------------
    def _request(self, request_id: str):
        with self.store.read() as conn:
            return load_request(conn, request_id)

    def _new_id(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}-{self.counter}"

    def _drain(self) -> None:
        """Workers keep going until nothing is pending or sending: every request must end."""
        for _ in range(4 * len(self.registered) + 4):
            with self.store.read() as conn:
                open_ids = [
                    row[0]
                    for row in conn.execute(
                        "SELECT request_id FROM outbox_request WHERE state IN ('pending', 'sending') ORDER BY rowid"
                    )
                ]
            if not open_ids:
                return
            for request_id in open_ids:
                grant = begin_attempt(self.store, request_id, "drain", LEASE_EXPIRED)
                if isinstance(grant, AttemptGrant):
                    record_sent(self.store, request_id, grant.attempt_no, self.transport.send(grant.send))
        raise AssertionError("requests still pending or sending after draining")

    # -- rules ---------------------------------------------------------------------------
    # Few requests, many interleavings: the bugs that matter hide in what happens to one request.
    @initialize(
        plan=st.lists(st.tuples(st.sampled_from(["manual", "auto"]), st.integers(0, 1)), min_size=1, max_size=3)
    )
    def register(self, plan: list[tuple[str, int]]) -> None:
        for origin, which in plan:
            request_id = self._new_id(origin[0])
            customer_id = self.customers[which]
            if origin == "manual":
                send_manual(self.store, ManualSend(request_id=request_id, customer_id=customer_id, text="人工回复"))
            else:
                evaluate(self.store, customer_id, 1000)
                with self.store.write() as conn:
                    batch = open_batch(conn, customer_id)
                    register_outbound(
                        conn,
                        OutboundIntent(
                            request_id=request_id,
                            customer_id=customer_id,
                            account_id="shop",
                            conversation_id=f"sim-direct-b{which + 1}",
                            recipient_id=f"b{which + 1}",
                            origin="auto",
                            body="自动回复",
                            batch_id=batch.id,
                            route_generation=batch.route_generation,
                            handling_epoch=batch.handling_epoch,
                        ),
                    )
            self.registered.add(request_id)

    def _pick(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from(sorted(self.registered)))

    @rule(data=st.data(), fate=st.sampled_from(FATES))
    def worker_attempts(self, data: st.DataObject, fate: str) -> None:
        """One attempt task runs to its end (or its worker dies on the way)."""
        request_id = self._pick(data)
        grant = begin_attempt(self.store, request_id, "worker", LEASE_HELD)
        if not isinstance(grant, AttemptGrant) or fate == "dies-before-call":
            return
        receipt = self.transport.send(grant.send) if fate in REACHES else None
        if fate == "accepted":
            record_sent(self.store, request_id, grant.attempt_no, receipt)
        elif fate in ("not-submitted", "rejected"):
            record_failure(self.store, request_id, grant.attempt_no, SendFailure(fate, "REFUSED"))  # type: ignore[arg-type]
        elif fate.startswith("timeout"):
            record_failure(self.store, request_id, grant.attempt_no, SendFailure("unknown", "TimeoutError"))
        # dies-after-submit: the platform has it; the attempt is never recorded

    @rule(target=slow_calls, data=st.data())
    def slow_worker_submits(self, data: st.DataObject):
        """A worker's call reached the platform; its answer is still on the wire."""
        request_id = self._pick(data)
        grant = begin_attempt(self.store, request_id, "slow-worker", LEASE_HELD)
        if not isinstance(grant, AttemptGrant):
            return None
        return request_id, grant, self.transport.send(grant.send)

    @rule(call=consumes(slow_calls), answer=st.sampled_from(["accepted", "timeout"]))
    def slow_worker_reports(self, call, answer: str) -> None:
        if call is None:
            return
        request_id, grant, receipt = call
        if answer == "accepted":
            record_sent(self.store, request_id, grant.attempt_no, receipt)
        else:
            record_failure(self.store, request_id, grant.attempt_no, SendFailure("unknown", "TimeoutError"))

    @rule(data=st.data(), expired=st.booleans())
    def task_redelivered(self, data: st.DataObject, expired: bool) -> None:
        """The broker hands an attempt task out again, before or after the holder's lease ran out."""
        request_id = self._pick(data)
        grant = begin_attempt(self.store, request_id, "redelivered", LEASE_EXPIRED if expired else LEASE_HELD)
        if isinstance(grant, AttemptGrant):  # granted: it submits at once
            record_sent(self.store, request_id, grant.attempt_no, self.transport.send(grant.send))

    @rule(data=st.data())
    def receipt_query(self, data: st.DataObject) -> None:
        request_id = self._pick(data)
        lookup = self.transport.query_send("shop", request_id)
        settle_by_receipt(self.store, request_id, lookup, data.draw(st.sampled_from([LEASE_HELD, LEASE_EXPIRED])))

    @rule(data=st.data())
    def echo(self, data: st.DataObject) -> None:
        received = self.platform.received("shop")
        if received:
            ingest_page(self.store, self.transport.echo_page("shop", data.draw(st.sampled_from(received))))

    @rule(data=st.data())
    def operator_confirms(self, data: st.DataObject) -> None:
        request_id = self._pick(data)
        on_platform = self.platform.received_by_ref(request_id)
        try:  # the operator looked at the platform: says what it shows
            confirm_result(self.store, request_id, on_platform is not None)
        except KefuError as error:
            assert error.code == "KEFU_REQUEST_NOT_UNKNOWN"

    @rule(data=st.data())
    def operator_retries(self, data: st.DataObject) -> None:
        previous, new_id = self._pick(data), self._new_id("r")
        try:
            retry_manual(self.store, new_id, previous)
        except KefuError as error:
            assert error.code in ("KEFU_RETRY_NEEDS_UNKNOWN", "KEFU_RETRY_EXISTS")
            assert self._request(new_id) is None  # a refused retry registers nothing
            return
        self.registered.add(new_id)

    @rule(which=st.integers(0, 1), resume=st.booleans())
    def pause_or_resume(self, which: int, resume: bool) -> None:
        (resume_handling if resume else pause_handling)(self.store, self.customers[which], *(() if resume else ("op",)))

    # -- invariants ----------------------------------------------------------------------
    @invariant()
    def no_double_submission(self) -> None:
        refs = [r.client_ref for r in self.platform.received("shop")]
        assert len(refs) == len(set(refs)), "a request id reached the platform twice"

    @invariant()
    def no_intent_is_lost_and_states_are_known(self) -> None:
        for request_id in self.registered:
            request = self._request(request_id)
            assert request is not None, f"intent {request_id} lost"
            assert request.state in STATES
            on_platform = self.platform.received_by_ref(request_id)
            if request_id in self.ever_sent:
                assert request.state == "sent", f"{request_id} was sent, now {request.state}"
            if request.state == "sent":
                self.ever_sent.add(request_id)
                assert on_platform is not None, f"{request_id} sent but the platform never had it"
                assert request.platform_message_id in (None, on_platform.platform_message_id)  # None: confirmed
            if request.state in ("failed", "revoked", "route-changed", "skipped", "pending"):
                assert on_platform is None or request.error_code == "KEFU_OPERATOR_NOT_DELIVERED", request_id


TestOutboxStateMachine = OutboxMachine.TestCase
TestOutboxStateMachine.settings = settings(
    max_examples=150, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
