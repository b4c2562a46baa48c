"""The pipeline: what happens to a buyer message, one step at a time (SPEC 3.5–3.9).

    receive ─► ingest (with admit) ─► turn ─► deliver ─► (settle)
    turn end, replay, reconciler ─► admit
    beat: reconcile (re-derive whatever is pending and overdue), check_reads, checkpoints

Each step takes the process's Services (the store and the ports: runtime.ports), does its work
in transactions, and returns a `Step`: what became of the work, and the follow-up work as data
(`RunTurn(customer)`, `Attempt(request, countdown_s)` …). A step never sleeps, polls or talks
to the broker: a backoff is a countdown on a follow-up, and the shell's dispatcher
(worker.dispatch) turns follow-ups into tasks. Every step is idempotent: SQLite is the truth,
and a step run twice, or after a crash, finds the work done or does it once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from config.retries import MEDIA_FETCH, SEND_NOT_SUBMITTED
from runtime.admission.batches import (
    batches_left_open,
    customers_waiting,
    customers_waiting_in,
    evaluate,
    load_customer,
    stranded_batches,
)
from runtime.agent.profiles import UNKNOWN as UNKNOWN_PROFILE
from runtime.agent.profiles import ProfileUnknown, governing_route, profile_name_of, report_unknown
from runtime.agent.turn import run_turn
from runtime.errors import KefuError, PageRejected, invalid_fields
from runtime.inbound import media as inbound_media
from runtime.inbound.inbox import (
    UNCHECKED,
    Unchecked,
    accounts_to_catch_up,
    overdue_pages,
    prune_ingested,
    record_received,
    refuse_page,
)
from runtime.inbound.ingest import NEVER_INGESTED, committed_cursor, ingest_page
from runtime.inbound.input_pause import InputPaused, hold_page, resume_input
from runtime.inbound.pages import InboundPage, parse_page
from runtime.outbox.read_checks import claim_due_read_check, schedule_read_checks
from runtime.outbox.read_receipts import accept_buyer_receipt
from runtime.outbox.requests import (
    AttemptGrant,
    AttemptSkipped,
    ReplyCheck,
    begin_attempt,
    begin_in,
    load_request,
    next_after,
    record_failure,
    record_sent,
    requests_to_attempt,
    requests_to_settle,
    sends_of_gone_senders,
    settle_by_receipt,
)
from runtime.placement.shards import local_placement
from runtime.ports import BuyerReadReceipt, NeverReceived, ReadStatusQueries, SendFailure, Services
from runtime.store import Connection, DeliveryStore, leases, now_ms
from runtime.store.leases import LeaseBusy, LeaseLost, new_owner
from runtime.store.states import OutboxState, PlacementState
from runtime.store.tables import OutboxRequest

log = logging.getLogger(__name__)

# A send the platform did not take waits config.retries.SEND_NOT_SUBMITTED between attempts,
# then the reconciler's grace takes over. A throttling hint is honoured up to MAX_THROTTLE_WAIT_S.
MAX_THROTTLE_WAIT_S = 600
RECONCILE_LIMIT = 1000  # of each kind of work per pass: the next pass takes the rest
READ_CHECKS_PER_ROUND = 100  # read-status queries per beat round: the next round takes the rest
_handed_out: dict[Path, int] = {}  # store -> the last customer a full pass handed out for admission


# --- follow-up work ------------------------------------------------------------------------


@dataclass(frozen=True)
class Ingest:
    page: dict[str, Any]  # a recorded page, as JSON
    shard: str | None = None  # another shard's queue: the account moved there (SPEC 3.12)


@dataclass(frozen=True)
class RecordRead:
    receipt: dict[str, Any]  # a buyer read receipt, as JSON


@dataclass(frozen=True)
class Admit:
    customer_id: int


@dataclass(frozen=True)
class RunTurn:
    customer_id: int
    countdown_s: float = 0.0


@dataclass(frozen=True)
class Attempt:
    request_id: str
    countdown_s: float = 0.0
    retries: int = 0  # not-submitted attempts before this one
    # Begun by the reply's registration, for this process to send at once (never published: a
    # published attempt begins again, finds this one in progress, and the reconciler settles it).
    begun: AttemptGrant | None = None


@dataclass(frozen=True)
class Settle:
    request_id: str


@dataclass(frozen=True)
class Archive:
    customer_id: int


@dataclass(frozen=True)
class FetchMedia:
    message_id: int
    countdown_s: float = 0.0


FollowUp = Ingest | RecordRead | Admit | RunTurn | Attempt | Settle | Archive | FetchMedia


@dataclass(frozen=True)
class Step:
    outcome: str  # what became of the work: for logs, task results and tests
    follow_ups: tuple[FollowUp, ...] = ()


Emit = Callable[[FollowUp], None]


# --- receiving -----------------------------------------------------------------------------


def receive(services: Services, page: InboundPage, fetched_after: str | None | Unchecked = UNCHECKED) -> Step:
    """Record a page a receiver got, before anything else (runtime.inbound.inbox: no page lives only in
    the broker); then it is ingested. A page ingested already, or one fetched after a cursor
    that moved on since, is not ingested again."""
    if not record_received(services.store, page, fetched_after):
        return Step("already-received")
    return Step("received", (Ingest(page.model_dump(mode="json")),))


def receive_read(receipt: BuyerReadReceipt) -> Step:
    return Step("received", (RecordRead(receipt.model_dump(mode="json")),))


def ingest(services: Services, data: object) -> Step:
    """Persist a recorded page, and admit each customer it touched in the same transaction:
    the turns of their batches follow."""
    store = services.store
    try:
        page = parse_page(data)
    except PageRejected as error:  # final: a malformed page never becomes valid by retrying
        log.error("page rejected: %s", "; ".join(error.problems))
        _refuse_unparsed(services, data, error.code)
        return Step("rejected")
    try:
        admission = services.settings.admission.batch_size
        result = ingest_page(store, page, admit_batch_size=admission, profiles=services.settings.agent.profile_names)
    except InputPaused:  # kept whole, published again on resume; the cursor did not move
        if hold_page(store, page):
            return Step("held")
        return Step("resumed meanwhile", (Ingest(page.model_dump(mode="json")),))
    except KefuError as error:
        if error.code not in NEVER_INGESTED:
            raise  # e.g. a store that cannot be opened: the page stays pending for the reconciler
        if error.code == "KEFU_ACCOUNT_UNKNOWN" and (shard := _home_of(services, page.account_id)):
            return Step(f"forwarded to {shard}", (Ingest(page.model_dump(mode="json"), shard),))
        log.error("page %s refused: %s", page.page_op_id, error.code)
        refuse_page(store, page.account_id, page.stream_id, page.page_op_id, error.code)
        return Step(f"refused {error.code}")
    _confirm(services, page)
    if result.replayed:  # the process that committed it may have died before its turns were due
        return Step("replayed", tuple(Admit(c) for c in result.customer_ids))
    media = tuple(FetchMedia(m) for m in result.media)  # fetched at once: a reference expires
    return Step("ingested", (*media, *(RunTurn(c) for c in result.turns_due or ())))


def fetch_media(services: Services, message_id: int) -> Step:
    """Fetch a buyer's image, file, voice message or video from its platform into the store
    (runtime.inbound.media); a transient failure is tried again after a backoff, a few times."""
    settings = services.settings
    body = inbound_media.fetch_media(
        services.store, services.transport_of, message_id, settings.media_max_bytes, settings.media_video_max_bytes
    )
    if body is None:
        return Step("no-such-media")
    if body.state == "pending":
        return Step(f"retry {body.code}", (FetchMedia(message_id, MEDIA_FETCH.wait_s(body.attempts)),))
    return Step(body.state if body.code is None else f"{body.state} {body.code}")


def _home_of(services: Services, account_id: str) -> str | None:
    """Another shard where an account this shard does not serve lives: where it moved to from
    here, else where the directory places it (a page that reached the wrong shard)."""
    with services.store.read() as conn:
        placement = local_placement(conn, account_id)
    if placement is not None and placement.state == PlacementState.MOVED:
        return placement.shard
    shard = services.shard_of(account_id)
    return shard if shard != services.settings.shard else None


def forwarded(services: Services, work: Ingest) -> None:
    """After the page went to its account's shard: done here, never published here again."""
    page = InboundPage.model_validate(work.page)
    refuse_page(services.store, page.account_id, page.stream_id, page.page_op_id, f"forwarded:{work.shard}")


def _refuse_unparsed(services: Services, data: object, code: str) -> None:
    """A recorded page that does not validate is done for good, or it would be published again."""
    if not isinstance(data, dict):
        return
    account_id, stream_id, page_op_id = (data.get(name) for name in ("account_id", "stream_id", "page_op_id"))
    if isinstance(account_id, str) and isinstance(stream_id, str) and isinstance(page_op_id, str):
        refuse_page(services.store, account_id, stream_id, page_op_id, code)


def _confirm(services: Services, page: InboundPage) -> None:
    """The page is committed: tell the platform (a failure only means it is served again)."""
    try:
        services.transport_of(page.account_id).confirm(page.account_id, page.cursor)
    except Exception as error:
        log.warning("confirming page %s failed (%s)", page.page_op_id, getattr(error, "code", type(error).__name__))


def record_read(services: Services, data: object) -> Step:
    """Store a buyer read receipt once. It never wakes an agent: the customer's session sees it
    at its next step."""
    try:
        receipt = BuyerReadReceipt.model_validate(data)
    except ValidationError as error:
        log.warning("buyer read receipt rejected: %s", invalid_fields(error, "receipt"))
        return Step("invalid")
    decision = accept_buyer_receipt(services.store, receipt)
    if decision not in ("stored", "already-stored"):
        log.info("buyer read receipt refused: %s", decision)
    return Step(decision)


def resume(store: DeliveryStore, account_id: str | None) -> Step:
    """Lift an input pause (SPEC 3.11): the pages it held are ingested again, and customers
    whose committed input it kept from admission are admitted."""
    pages = resume_input(store, account_id)
    with store.read() as conn:
        customers = customers_waiting_in(conn, account_id)
    held = f"{len(pages)} held page(s), {len(customers)} customer(s) to admit"
    return Step(held, (*(Ingest(page) for page in pages), *(Admit(c) for c in customers)))


# --- admission and the turn ----------------------------------------------------------------


def admit(services: Services, customer_id: int) -> Step:
    """Claim the customer's pending input as a batch (SPEC 3.6); a batch is a turn to run."""
    settings = services.settings
    decision = evaluate(services.store, customer_id, settings.admission.batch_size, settings.agent.profile_names)
    if decision.reason == "profile-unknown":  # loud on every pass: the customer's input waits
        log.warning(
            "%s: customer %s is not answered: their route names agent profile %r, which is not configured;"
            " their input waits (`kefu agents list`)",
            UNKNOWN_PROFILE,
            customer_id,
            decision.profile,
        )
    return Step(decision.reason, (RunTurn(customer_id),) if decision.batch_id is not None else ())


def turn(services: Services, customer_id: int, emit: Emit, sends_here: bool = False) -> Step:
    """One agent turn over the customer's open batch, under the customer's writer lease (fenced,
    renewed while the turn runs). Each reply the agent registers is emitted as an `Attempt`
    at once, so it goes out while the turn goes on; input that came during the turn is
    admitted after it. `sends_here`: `emit` sends each attempt at once, in this process (the
    worker runs it in the turn's own task), so the registration begins it."""
    settings, store = services.settings, services.store
    begun: dict[str, AttemptGrant] = {}

    def begin_here(conn: Connection, request: OutboxRequest, checked: ReplyCheck) -> None:
        try:
            services.transport_of(request.account_id)
        except Exception:  # no transport, or its account unreadable in this transaction: the attempt tells
            return
        owner, lease_s = new_owner(), settings.outbox.attempt_lease_s
        token = store.guard.token if store.guard else None
        grant = begin_in(conn, request, owner, lease_s, token, checked=checked)
        if isinstance(grant, AttemptGrant):
            begun[request.request_id] = grant

    try:
        with store.read() as conn:
            profile, provider = services.agent_for(profile_name_of(conn, customer_id))
    except ProfileUnknown as unknown:  # gone since admission: the batch stays open, and waits
        return _profile_gone(services, customer_id, unknown)
    with leases.claimed(store, f"customer:{customer_id}", settings.agent.turn_lease_s) as fence:
        try:
            result = run_turn(
                store,
                provider,
                customer_id,
                settings.sessions_dir,
                settings.zone,
                settings.agent,
                on_registered=lambda request_id: emit(Attempt(request_id, begun=begun.pop(request_id, None))),
                attachments=services.attachments,
                memory_engine=services.memory,
                fence=fence,
                begin_attempt=begin_here if sends_here else None,
                fetch_images=lambda ids: [
                    inbound_media.fetch_media(store, services.transport_of, m, settings.media_max_bytes) for m in ids
                ],
                profile=profile,
            )
        except LeaseBusy:  # the holder finishes the batch and re-runs admission; a dead holder's lease expires
            return Step("busy")
        except LeaseLost as lost:  # another worker holds the customer now and carries on
            log.warning("turn of customer %s stopped: %s", customer_id, lost.code)
            return Step("lease-lost")
    if result is None:
        return Step("no-open-batch")
    if result.outcome == "waiting":  # a model call failed: tried again after its backoff, in a new run
        return Step("waiting", (RunTurn(customer_id, result.retry_after_s),))
    archive: tuple[FollowUp, ...] = (Archive(customer_id),) if result.archive_due else ()
    return Step(result.outcome, (*archive, Admit(customer_id)) if result.admit_next else archive)


def _profile_gone(services: Services, customer_id: int, unknown: ProfileUnknown) -> Step:
    """A batch admitted under a profile that has left the settings since (a worker restarted with
    other settings): it stays open, its turn runs once the profile is back (the reconciler)."""
    log.warning("%s: turn of customer %s waits: %s", unknown.code, customer_id, unknown.message)
    with services.store.write() as conn:
        customer = load_customer(conn, customer_id)
        route = governing_route(conn, customer) if customer is not None else None
        if customer is not None and route is not None:
            report_unknown(conn, customer, route)
    return Step("profile-unknown")


# --- sending -------------------------------------------------------------------------------


def deliver_in_order(services: Services, request_ids: Sequence[str]) -> Iterator[tuple[str, Step]]:
    """An operator's message now (its parts in order, e.g. a file then its text), each part's
    step as it is attempted. A part's follow-up attempt of the next part is left out (it is
    attempted next, here); a part that has to wait its turn gets an attempt for the workers."""
    for index, request_id in enumerate(request_ids):
        step = deliver(services, request_id)
        later = set(request_ids[index + 1 :])
        follow_ups = [w for w in step.follow_ups if not (isinstance(w, Attempt) and w.request_id in later)]
        if step.outcome in ("waiting-for-earlier", "in-progress"):  # a worker sends it in its turn
            follow_ups.append(Attempt(request_id))
        yield request_id, Step(step.outcome, tuple(follow_ups))


def deliver(services: Services, request_id: str, retries: int = 0, begun: AttemptGrant | None = None) -> Step:
    """One attempt of an outbox request (SPEC 3.8): begin it in a transaction, submit it, record
    the outcome. A request whose outcome is unknown is settled by a receipt query, never sent
    again blindly; one the platform did not take is attempted again after a backoff; once a
    request stops holding its customer's queue, the next one in order is attempted (found by
    the transaction that recorded the outcome)."""
    store = services.store
    grant = begun or begin_attempt(
        store, request_id, new_owner(), services.settings.outbox.attempt_lease_s, can_send=services.transport_of
    )
    if isinstance(grant, AttemptSkipped):
        if grant.reason in ("waiting-for-earlier", "in-progress", "moving"):
            return Step(grant.reason)  # the earlier attempt, the reconciler, or the account's new shard
        if grant.reason == "abandoned":  # result-unknown now: ask the platform at once
            return Step("result-unknown", (Settle(request_id), *_attempt(next_after(store, request_id))))
        return Step(grant.reason, _attempt(next_after(store, request_id)))
    transport = services.transport_of(grant.send.account_id)
    try:
        receipt = transport.send(grant.send)
    except Exception as error:
        failure = error if isinstance(error, SendFailure) else SendFailure("unknown", type(error).__name__)
        following = record_failure(store, request_id, grant.attempt_no, failure)
        log.warning("send %s failed: %s %s", request_id, failure.kind, failure.code)
        if failure.kind == "not-submitted" and retries < SEND_NOT_SUBMITTED.retries:
            hint = min(failure.retry_after_s or 0, MAX_THROTTLE_WAIT_S)
            return Step(
                "not-submitted", (Attempt(request_id, SEND_NOT_SUBMITTED.wait_s(retries + 1, hint), retries + 1),)
            )
        if failure.kind == "unknown":  # it may or may not have reached the platform: settle it
            return Step("result-unknown", (Settle(request_id), *_attempt(following)))
        return Step(failure.kind, _attempt(following))
    following = record_sent(store, request_id, grant.attempt_no, receipt)
    if isinstance(transport, ReadStatusQueries) and grant.send.recipient_id:
        checks, delay_ms = transport.read_status_schedule
        schedule_read_checks(store, request_id, checks, delay_ms, now_ms())
    return Step("sent", _attempt(following))


def _attempt(request_id: str | None) -> tuple[FollowUp, ...]:
    return (Attempt(request_id),) if request_id is not None else ()


def settle(services: Services, request_id: str) -> Step:
    """One provider receipt query for a result-unknown request: 'settled' (delivered),
    'never-received' (pending again, so attempted anew), 'still-unknown' or 'not-unknown'.
    Never re-submits what may have arrived; an operator confirms or retries what stays unknown."""
    store = services.store
    with store.read() as conn:
        request = load_request(conn, request_id)
    if request is None or request.state != OutboxState.RESULT_UNKNOWN:
        return Step("not-unknown")
    lookup = services.transport_of(request.account_id).query_send(request.account_id, request_id)
    if settle_by_receipt(store, request_id, lookup, services.settings.outbox.attempt_lease_s):
        if isinstance(lookup, NeverReceived):
            return Step("never-received", (Attempt(request_id),))
        return Step("settled")
    return Step("still-unknown" if lookup is None else "not-unknown")


# --- the beat ------------------------------------------------------------------------------


def reconcile(services: Services, grace_s: float | None = None) -> Step:
    """Re-derive from SQLite whatever is pending and overdue, so a lost or duplicated broker
    message never loses or repeats work: input to admit, batches to run, requests to attempt
    or settle, received pages whose broker message was lost, and pages the platform served
    while no listener ran (catch-up from the committed cursor).

    `grace_s` 0 is a worker's pass as it starts: what its dead predecessor had taken from the
    broker but not begun (Redis hands it back only after the visibility timeout) goes again
    now, not after the grace. Work still queued elsewhere then runs twice, which every step
    tolerates (leases, receipts). Catch-up keeps the configured grace: it asks the platform."""
    settings, store, now = services.settings, services.store, now_ms()
    grace_ms = int((settings.reconcile.grace_s if grace_s is None else grace_s) * 1000)
    quiet = now - grace_ms
    lease = now - int(settings.outbox.attempt_lease_s * 1000)
    expired = inbound_media.expire_media(store, now, RECONCILE_LIMIT)  # too old to fetch: no platform call
    with store.read() as conn:
        admissions = customers_waiting(conn, quiet, RECONCILE_LIMIT, _handed_out.get(store.path, 0))
        turns = batches_left_open(conn, quiet, RECONCILE_LIMIT)
        attempts = requests_to_attempt(conn, quiet, lease, RECONCILE_LIMIT)
        settlements = requests_to_settle(conn, settings.outbox.receipt_query_limit, RECONCILE_LIMIT)
        media = inbound_media.pending_media(conn, RECONCILE_LIMIT, received_before=quiet, now=now)
    _handed_out[store.path] = admissions[-1] if len(admissions) == RECONCILE_LIMIT else 0  # the rest next pass
    recorded = overdue_pages(store, grace_ms)
    prune_ingested(store)
    caught_up = _catch_up(services)
    follow_ups = (
        *(Admit(c) for c in admissions),
        *(RunTurn(c) for c in turns),
        *(Attempt(r) for r in attempts),
        *(Settle(r) for r in settlements),
        *(FetchMedia(m) for m in media),
        *(Ingest(page) for page in recorded),
        *caught_up,
    )
    counts = (
        f"{len(admissions)} admissions, {len(turns)} turns, {len(attempts)} attempts,"
        f" {len(settlements)} settlements, {len(media)} media{f' ({expired} expired)' if expired else ''},"
        f" {len(recorded)} received pages, {len(caught_up)} pages"
    )
    return Step(counts, follow_ups)


def rescue(services: Services) -> Step:
    """Work whose holder died, taken up again now rather than after the reconciler's grace or
    the attempt lease: leases of processes gone on this host are lapsed first (a worker's
    restart, a pool process Celery lost), then every open batch whose lease lapsed gets its
    turn, and every send whose process is gone its next attempt (which records it
    result-unknown, for a receipt query). Cheap enough for a beat a few times per lease: scans
    of unexpired leases, open batches and sends in flight."""
    store = services.store
    lapsed = leases.lapse_gone_holders(store)
    with store.read() as conn:
        stranded = stranded_batches(conn, now_ms(), RECONCILE_LIMIT)
        sends = sends_of_gone_senders(conn, RECONCILE_LIMIT)
    counts = f"{len(lapsed)} lease(s) of gone holders, {len(stranded)} stranded turn(s), {len(sends)} stranded send(s)"
    return Step(counts, (*(RunTurn(c) for c in stranded), *(Attempt(r) for r in sends)))


def _catch_up(services: Services) -> list[FollowUp]:
    """The page after each account's committed cursor, when it is overdue (served while no
    listener ran), received like any other page."""
    store = services.store
    with store.read() as conn:
        accounts = accounts_to_catch_up(conn)
    overdue_before = now_ms() - int(services.settings.reconcile.grace_s * 1000)
    found: list[FollowUp] = []
    for account_id, platform in accounts:
        transport = services.transports.get(platform)
        if transport is None:
            continue
        cursor = committed_cursor(store, account_id, transport.stream_id)
        try:
            page = transport.page_after(account_id, cursor)
        except Exception as error:  # one platform being down must not stop the others' catch-up
            log.warning("catch-up of %s failed (%s)", account_id, getattr(error, "code", type(error).__name__))
            continue
        if page is None:
            continue
        oldest = min(m.occurred_at for g in page.groups for m in g.messages)
        if oldest.timestamp() * 1000 < overdue_before:
            found.extend(receive(services, page, fetched_after=cursor).follow_ups)
    return found


def check_reads(services: Services) -> Step:
    """The read-status queries that are due (SPEC 3.9): each sent 1:1 message is asked about
    once, its check marked made before the query (runtime.outbox.read_checks), so a crash, a
    redelivered task or an overlapping round never asks again. A read found is stored like a
    pushed receipt; a failed query leaves the message unconfirmed and is not retried."""
    store, now = services.store, now_ms()
    reads = 0
    for _ in range(READ_CHECKS_PER_ROUND):
        check = claim_due_read_check(store, now)
        if check is None:
            break
        transport = services.transport_of(check.account_id)
        if not isinstance(transport, ReadStatusQueries):
            continue
        try:
            readers = transport.read_by(check.account_id, check.platform_message_id)
        except SendFailure as failure:  # unconfirmed, and not asked again
            log.info("read status of %s not available: %s", check.request_id, failure.code)
            continue
        read_at = readers.get(check.recipient_id)
        if read_at is not None:
            receipt = BuyerReadReceipt(
                account_id=check.account_id,
                conversation_id=check.conversation_id,
                platform_message_id=check.platform_message_id,
                reader_id=check.recipient_id,
                read_at=datetime.fromtimestamp((read_at or now) / 1000, tz=UTC),
            )
            reads += accept_buyer_receipt(store, receipt) == "stored"
    return Step(f"{reads} reads")
