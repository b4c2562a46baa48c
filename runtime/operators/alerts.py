"""Alerts for humans: a handoff, a send that ended failed or result-unknown, a failed listener.

The console shows what needs a human now (runtime.operators.status.notices); an alert is the event, kept
so it can also go out, e.g. to a webhook. Each is raised in the transaction of the change that
calls for it (the triggers of migration V17, and `raise_alert` for a send refused before it was
stored), so none is lost and none is raised for a change that rolled back. The alert table is
their outbox: `deliver_alerts` hands each to a sink at least once, oldest first, one round at a
time across processes (a lease), stopping at the first failure so the order holds; a sink that
refuses one for good (HTTP 4xx) does not hold up the rest.

An alert carries ids and codes only: never a message's text, a handoff's words or a credential.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, Protocol

from pydantic import BaseModel

from runtime.store import DeliveryStore, leases, now_ms, queries
from runtime.store.connection import Connection
from runtime.store.states import AlertState

ROUND_LEASE_S = 60.0  # one delivery round at a time: rounds from beat may overlap in a prefork pool
KEEP_SETTLED_MS = 30 * 86_400_000  # delivered or refused alerts are kept a month, then pruned


class AlertKind(StrEnum):
    HANDOFF = "handoff"
    SEND_FAILED = "send-failed"
    SEND_UNKNOWN = "send-unknown"
    LISTENER_FAILED = "listener-failed"
    PROFILE_UNKNOWN = "profile-unknown"  # a route names an agent profile not configured (runtime.agent.profiles)


class Alert(BaseModel):
    id: int  # the order they were raised in
    key: str  # random, unique: the receiver's idempotency key (ids repeat after a restore)
    kind: AlertKind
    account_id: str | None
    customer_id: int | None
    request_id: str | None
    code: str | None
    simulated: bool  # raised for a simulated account (`kefu demo`): kept apart from real ones
    raised_at: int  # ms since epoch
    attempts: int


class SinkAnswer(BaseModel):
    outcome: Literal["delivered", "retry", "refused"]
    failure: str | None = None  # a code and safe facts, never a response body


class AlertSink(Protocol):
    def send(self, alert: Alert) -> SinkAnswer: ...


class AlertBacklog(BaseModel):
    raised: int  # not delivered yet
    refused: int  # refused for good by the sink
    last_failure: str | None  # why the oldest undelivered alert did not go out, if it was tried


def raise_alert(
    conn: Connection,
    kind: AlertKind,
    account_id: str,
    customer_id: int | None = None,
    request_id: str | None = None,
    code: str | None = None,
) -> None:
    conn.execute(
        queries.alert.RAISE,
        {"k": kind, "a": account_id, "c": customer_id, "r": request_id, "code": code, "at": now_ms()},
    )


def undelivered(store: DeliveryStore, limit: int = 100) -> list[Alert]:
    with store.read() as conn:
        rows = conn.execute(queries.alert.UNDELIVERED, {"n": limit}).mappings()
        return [Alert.model_validate(dict(row)) for row in rows]


def deliver_alerts(store: DeliveryStore, sink: AlertSink, limit: int = 100) -> int:
    """One round: what was raised, oldest first, until the sink fails; the number delivered.
    A round that finds another one running does nothing (that one delivers them)."""
    delivered = 0
    with leases.held(store, "alerts", ROUND_LEASE_S) as fence:
        if fence is None:
            return 0
        for alert in undelivered(store, limit):
            answer = sink.send(alert)
            with leases.fenced(store, fence) as conn:  # a round that lost its lease records nothing
                if answer.outcome == "retry":
                    conn.execute(queries.alert.RETRY, {"f": answer.failure, "i": alert.id})
                    break
                state = AlertState.DELIVERED if answer.outcome == "delivered" else AlertState.REFUSED
                conn.execute(queries.alert.SETTLE, {"s": state, "at": now_ms(), "f": answer.failure, "i": alert.id})
            delivered += answer.outcome == "delivered"
        with leases.fenced(store, fence) as conn:
            conn.execute(queries.alert.PRUNE, {"before": now_ms() - KEEP_SETTLED_MS})
    return delivered


def backlog(store: DeliveryStore) -> AlertBacklog:
    with store.read() as conn:
        raised, refused, failure = conn.execute(queries.alert.BACKLOG).one()
    return AlertBacklog(raised=raised, refused=refused, last_failure=failure)
