"""Alerts for humans: a handoff, a send that ended failed or result-unknown, a failed listener.

The console shows what needs a human now (runtime.status.notices); an alert is the event, kept
so it can also go to a webhook. Each is raised in the transaction of the change that calls for
it (triggers of migration V17, and `raise_alert` for a send refused before it was stored), so
none is lost and none is raised for a change that rolled back. The alert table is their outbox:
beat delivers each at least once, in order, under its id (worker.alert_sinks).

An alert carries ids and codes only: never a message's text, a handoff's words or a credential.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel

from runtime.store import DeliveryStore, now_ms
from runtime.store.connection import Connection
from runtime.store.sql import sql


class AlertKind(StrEnum):
    HANDOFF = "handoff"
    SEND_FAILED = "send-failed"
    SEND_UNKNOWN = "send-unknown"
    LISTENER_FAILED = "listener-failed"


class Alert(BaseModel):
    id: int  # unique within the shard: with the shard's name, the receiver's idempotency key
    kind: AlertKind
    account_id: str | None
    customer_id: int | None
    request_id: str | None
    code: str | None
    raised_at: int  # ms since epoch
    attempts: int


class AlertBacklog(BaseModel):
    undelivered: int
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
        sql(
            "INSERT INTO alert (kind, account_id, customer_id, request_id, code, raised_at)"
            " VALUES (:k, :a, :c, :r, :code, :at)"
        ),
        {"k": kind, "a": account_id, "c": customer_id, "r": request_id, "code": code, "at": now_ms()},
    )


def undelivered(store: DeliveryStore, limit: int = 100) -> list[Alert]:
    with store.read() as conn:
        rows = conn.execute(
            sql(
                "SELECT id, kind, account_id, customer_id, request_id, code, raised_at, attempts FROM alert"
                " WHERE delivered_at IS NULL ORDER BY id LIMIT :n"
            ),
            {"n": limit},
        ).mappings()
        return [Alert.model_validate(dict(row)) for row in rows]


def mark_delivered(store: DeliveryStore, alert_id: int) -> None:
    with store.write() as conn:
        conn.execute(sql("UPDATE alert SET delivered_at = :at WHERE id = :i"), {"at": now_ms(), "i": alert_id})


def mark_undelivered(store: DeliveryStore, alert_id: int, failure: str) -> None:
    """A delivery that failed: tried again on beat's next round."""
    with store.write() as conn:
        conn.execute(
            sql("UPDATE alert SET attempts = attempts + 1, last_failure = :f WHERE id = :i"),
            {"f": failure, "i": alert_id},
        )


def backlog(store: DeliveryStore) -> AlertBacklog:
    with store.read() as conn:
        count, failure = conn.execute(
            sql(
                "SELECT count(*), (SELECT last_failure FROM alert WHERE delivered_at IS NULL ORDER BY id LIMIT 1)"
                " FROM alert WHERE delivered_at IS NULL"
            )
        ).one()
    return AlertBacklog(undelivered=count, last_failure=failure)
