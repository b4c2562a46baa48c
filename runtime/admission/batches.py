"""Admission (SPEC 3.6): decide that the agent should answer, and claim a persisted batch.

A customer has at most one open batch (claimed or committed but its turn not ended); input
that arrives meanwhile waits for the next batch, so turns of one customer never overlap.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from pydantic import TypeAdapter

from config.settings import DEFAULT_PROFILE
from runtime.accounts.registry import account_is_live, load_account
from runtime.admission.routes import resolve_route
from runtime.agent.profiles import report_unknown
from runtime.agent.rendering import RenderableMessage
from runtime.inbound.input_pause import is_paused
from runtime.outbox.read_receipts import reads_from_json
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection
from runtime.store.states import QuestionState
from runtime.store.tables import Account, AdmissionBatch, BuyerRead, Customer, Route, SessionHeader


def batch_id_of(customer_id: int, first_platform_message_id: str) -> str:
    """Stable, and the same on any shard: derived from the first claimed message as the
    platform names it (row ids are renumbered when an account moves to another shard)."""
    digest = hashlib.sha256(first_platform_message_id.encode()).hexdigest()[:12]
    return f"b{customer_id}-{digest}"


Reason = Literal[
    "admitted",
    "open-batch",
    "nothing-pending",
    "trigger-not-met",
    "no-route",
    "route-disabled",
    "observing",
    "profile-unknown",
    "paused",
    "account-not-live",
    "input-paused",
    "unknown-customer",
]


@dataclass(frozen=True)
class Known:
    """What the caller's transaction read already (ingestion, with the customer's row from its
    upsert): `decide` does not read it again."""

    customer: Customer
    open_batch_id: str | None
    account: Account | None
    input_paused: bool


@dataclass(frozen=True)
class AdmissionDecision:
    reason: Reason
    batch_id: str | None = None  # set for "admitted" and "open-batch": run its turn
    profile: str | None = None  # "profile-unknown": the agent profile the route names


def load_customer(conn: Connection, customer_id: int) -> Customer | None:
    row = conn.execute(queries.customer.BY_ID, {"id": customer_id}).mappings().first()
    return Customer.model_validate(dict(row)) if row else None


def open_batch(conn: Connection, customer_id: int) -> AdmissionBatch | None:
    row = conn.execute(queries.admission_batch.OPEN, {"c": customer_id}).mappings().first()
    return AdmissionBatch.model_validate(dict(row)) if row else None


_LINES = TypeAdapter(list[RenderableMessage])


def _columns(alias: str, model: type[Customer | AdmissionBatch | Account | SessionHeader]) -> str:
    return ", ".join(f"{alias}.{name}" for name in model.model_fields)


# A turn's one read: each row's columns, in the order `turn_rows` splits them.
_TURN_ROWS = queries.customer.turn_rows(
    f"{_columns('c', Customer)}, {_columns('b', AdmissionBatch)}, {_columns('a', Account)},"
    f" {_columns('s', SessionHeader)}"
)


class TurnRows(NamedTuple):
    """What a turn starts from, in one read."""

    customer: Customer
    batch: AdmissionBatch | None  # the open batch
    account: Account | None
    session: SessionHeader | None  # the customer's current session's header
    reads: list[BuyerRead]  # what the buyer read that the session has not been told yet
    lines: list[RenderableMessage]  # the open batch's, in order
    questions: bool  # a question the agent asked the buyer waits to be offered (runtime.agent.pending_questions)


def turn_rows(conn: Connection, customer_id: int) -> TurnRows | None:
    asked = {"asked": QuestionState.PENDING, "offered": QuestionState.OFFERED}
    row = conn.execute(_TURN_ROWS, {"c": customer_id, **asked}).first()
    if row is None:
        return None
    parts, at = [], 0
    for model in (Customer, AdmissionBatch, Account, SessionHeader):
        values, at = row[at : at + len(model.model_fields)], at + len(model.model_fields)
        parts.append(model.model_validate(dict(zip(model.model_fields, values, strict=True))) if values[0] else None)
    customer, batch, account, session = parts
    reads, lines, questions = reads_from_json(row[at]), _LINES.validate_json(row[at + 1]), bool(row[at + 2])
    return TurnRows(customer, batch, account, session, reads, lines, questions)  # type: ignore[arg-type]


def nothing_to_admit(conn: Connection, customer_id: int) -> bool:
    """No open batch and no buyer input waiting: admission would have nothing to decide."""
    return bool(conn.execute(queries.customer.NOTHING_TO_ADMIT, {"c": customer_id}).scalar_one())


def evaluate(
    store: DeliveryStore, customer_id: int, batch_size: int, profiles: Collection[str] = (DEFAULT_PROFILE,)
) -> AdmissionDecision:
    """Claim up to `batch_size` pending messages into a new batch when the route admits.
    `profiles`: the agent profiles configured (runtime.agent.profiles).

    A read first: with no open batch and no buyer input waiting (as after most turns) there is
    nothing to decide, and no write lock is taken. Input committed after that read brings its
    own admission (runtime.inbound.ingest decides it in the transaction that stores it)."""
    with store.read() as conn:
        if nothing_to_admit(conn, customer_id):
            return AdmissionDecision("nothing-pending")
    with store.write() as conn:
        return decide(conn, customer_id, batch_size, profiles=profiles)


def decide(
    conn: Connection,
    customer_id: int,
    batch_size: int,
    known: Known | None = None,
    profiles: Collection[str] = (DEFAULT_PROFILE,),
) -> AdmissionDecision:
    """Inside the caller's write transaction: `evaluate`'s decision, and the batch it claims."""
    if known is None:
        loaded = load_customer(conn, customer_id)
        if loaded is None:
            return AdmissionDecision("unknown-customer")
        batch = open_batch(conn, customer_id)
        account = None if batch else load_account(conn, loaded.account_id)
        known = Known(loaded, batch.id if batch else None, account, not batch and is_paused(conn, loaded.account_id))
    customer = known.customer
    if known.open_batch_id is not None:
        return AdmissionDecision("open-batch", known.open_batch_id)
    if known.account is None or not account_is_live(known.account):
        return AdmissionDecision("account-not-live")
    if customer.handling_paused:
        return AdmissionDecision("paused")
    if known.input_paused:
        return AdmissionDecision("input-paused")
    route = resolve_route(conn, customer.account_id, customer.conversation_type, customer.conversation_id)
    if route is None:
        return AdmissionDecision("no-route")
    if not route.enabled:
        return AdmissionDecision("route-disabled")
    if route.mode == "observe":  # listen and store, never answer: what waits is kept as observed
        conn.execute(queries.inbound_message.OBSERVE_PENDING, {"c": customer_id})
        return AdmissionDecision("observing")
    if route.agent_preset not in (None, DEFAULT_PROFILE, *profiles):
        # The profile left the settings after the route named it: the input waits (never another
        # agent's answer), and an alert says so (runtime.agent.profiles).
        report_unknown(conn, customer, route)
        return AdmissionDecision("profile-unknown", profile=route.agent_preset)
    pending = conn.execute(queries.inbound_message.PENDING, {"c": customer_id, "n": batch_size}).all()
    if len(pending) < batch_size:  # all of it: the figures of the buyer input waiting come with it
        buyers = [row for row in pending if row[2]]
        live = (
            len(buyers),
            max((int(r[3] == 1) for r in buyers), default=None),
            min((r[4] for r in buyers), default=None),
        )
    else:  # more waits than a batch takes: count it all
        live = conn.execute(queries.inbound_message.LIVE_INPUT, {"c": customer_id}).one()
    if not pending or live[0] == 0:
        return AdmissionDecision("nothing-pending")
    if customer.conversation_type == "group" and not _group_trigger_met(conn, customer_id, route, live):
        return AdmissionDecision("trigger-not-met")
    batch_id = batch_id_of(customer_id, pending[0][1])
    conn.execute(
        queries.admission_batch.CLAIM,
        {
            "id": batch_id,
            "c": customer_id,
            "epoch": customer.handling_epoch,
            "route": route.id,
            "generation": route.generation,
            "count": len(pending),
            "at": now_ms(),
        },
    )
    conn.execute(
        queries.inbound_message.CLAIM,
        {"b": batch_id, "c": customer_id, "lo": pending[0][0], "hi": pending[-1][0]},
    )
    return AdmissionDecision("admitted", batch_id)


def _group_trigger_met(conn: Connection, customer_id: int, route: Route, live: tuple[Any, ...]) -> bool:
    """Group input waits until one of the route's triggers holds (any one is enough)."""
    count, mentioned, oldest = live
    if route.trigger_mention and mentioned:  # explicit provider mention evidence only
        return True
    if route.trigger_every_n and count >= route.trigger_every_n:
        return True
    if route.trigger_interval_s:
        last = conn.execute(queries.admission_batch.LAST_CREATED, {"c": customer_id}).scalar_one()
        since: int = last if last is not None else oldest
        return now_ms() - since >= route.trigger_interval_s * 1000
    return False


def commit_batch(conn: Connection, batch_id: str) -> None:
    """The session log holds the batch durably: its messages are committed."""
    at = now_ms()
    conn.execute(queries.admission_batch.COMMIT, {"b": batch_id, "at": at})
    conn.execute(queries.inbound_message.COMMIT, {"b": batch_id})


def revoke_batch(conn: Connection, batch_id: str) -> None:
    """Handling was paused after admission: the batch is dropped, its unclaimed input suppressed."""
    conn.execute(queries.admission_batch.REVOKE, {"b": batch_id, "at": now_ms()})
    conn.execute(queries.inbound_message.SUPPRESS_CLAIMED, {"b": batch_id})


def finish_batch(conn: Connection, batch_id: str, model_calls: int = 0, model_ms: int = 0) -> bool:
    """Done; with the model calls its turn's last run made and their time (runtime.operators.status).
    True when admission has something to decide for the customer now (`nothing_to_admit`, read
    in the same statement): input that came during the turn."""
    params = {"b": batch_id, "at": now_ms(), "c": model_calls, "ms": model_ms}
    found = conn.execute(queries.admission_batch.FINISH, params).first()
    return found is not None and bool(found[0])


def customers_waiting(conn: Connection, received_before: int, limit: int, after: int = 0) -> list[int]:
    """Customers whose input waited longer than a grace: its admission was lost (reconciler).
    Up to `limit` of them, in customer order from the one after `after` round to it, so that
    customers whose input waits on (kept back by an input pause) never crowd the others out."""
    found: list[int] = []
    query = queries.inbound_message.OVERDUE_CUSTOMERS
    for start, until in ((after, 2**63 - 1), (0, after)):
        params = {"after": start, "until": until, "t": received_before, "n": limit - len(found)}
        found += [int(c) for c in conn.execute(query, params).scalars()]
        if len(found) >= limit or not after:
            break
    return found


def customers_waiting_in(conn: Connection, account_id: str | None) -> list[int]:
    """Customers of an account (None: all) with input waiting, e.g. kept back by an input pause."""
    query = queries.inbound_message.WAITING_CUSTOMERS
    return [int(c) for c in conn.execute(query, {"a": account_id}).scalars()]


def batches_left_open(conn: Connection, updated_before: int, limit: int) -> list[int]:
    """Customers whose admitted batch has not moved for a grace: its turn was lost (reconciler)."""
    return [
        int(c) for c in conn.execute(queries.admission_batch.LEFT_OPEN, {"t": updated_before, "n": limit}).scalars()
    ]


def stranded_batches(conn: Connection, now: int, limit: int) -> list[int]:
    """Customers whose open batch's turn lost its holder: the customer's writer lease lapsed
    (expired unrenewed, or its process was seen gone: runtime.store.leases) rather than being given
    back. Their turn is run again at once, with no grace: nothing else is on its way."""
    return [int(c) for c in conn.execute(queries.admission_batch.STRANDED, {"now": now, "n": limit}).scalars()]


def suppress_waiting(conn: Connection, customer_id: int) -> None:
    """Handling was paused: the customer's waiting input is kept, never admitted."""
    conn.execute(queries.inbound_message.SUPPRESS_PENDING, {"c": customer_id})
