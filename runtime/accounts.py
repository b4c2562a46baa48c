"""Accounts and routes: the minimum the pipeline needs (operations in depth come later)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Connection

from runtime.errors import KefuError
from runtime.store import DeliveryStore, now_ms
from runtime.store.sql import sql
from runtime.store.tables import Account, Route


class AccountSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=128)
    platform: Literal["dingtalk", "wangwang", "simulator"]
    identity: str = Field(min_length=1, max_length=256)
    workspace: str = "default"


class DirectRouteSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=128)
    account_id: str
    target: Literal["all", "specific"] = "all"
    conversation_id: str | None = None
    enabled: bool = True


def create_account(store: DeliveryStore, spec: AccountSpec) -> Account:
    with store.write() as conn:
        clash = conn.execute(
            sql("SELECT id FROM account WHERE id = :id OR (platform = :platform AND identity = :identity)"),
            {"id": spec.id, "platform": spec.platform, "identity": spec.identity},
        ).first()
        if clash is not None:
            raise KefuError(
                "KEFU_ACCOUNT_EXISTS",
                f"account {clash[0]!r} already holds this id or {spec.platform} identity",
                "reuse that account, or delete it first",
            )
        row = Account(**spec.model_dump(), simulated=spec.platform == "simulator", created_at=now_ms())
        conn.execute(Account.__table__.insert().values(**row.model_dump()))
    return row


def create_direct_route(store: DeliveryStore, spec: DirectRouteSpec) -> Route:
    if (spec.target == "specific") != (spec.conversation_id is not None):
        raise KefuError(
            "KEFU_ROUTE_INVALID",
            "a 'specific' route needs conversation_id and an 'all' route must not have one",
        )
    with store.write() as conn:
        if load_account(conn, spec.account_id) is None:
            raise KefuError("KEFU_ACCOUNT_UNKNOWN", f"no account {spec.account_id!r}", "create the account first")
        row = Route(**spec.model_dump(), conversation_type="direct", created_at=now_ms())
        conn.execute(Route.__table__.insert().values(**row.model_dump()))
    return row


def load_account(conn: Connection, account_id: str) -> Account | None:
    row = conn.execute(sql("SELECT * FROM account WHERE id = :id"), {"id": account_id}).mappings().first()
    return Account.model_validate(dict(row)) if row else None


def resolve_route(conn: Connection, account_id: str, conversation_type: str, conversation_id: str) -> Route | None:
    """The route that governs a conversation: a specific route beats `all`, even when disabled."""
    row = (
        conn.execute(
            sql(
                "SELECT * FROM route WHERE account_id = :a AND conversation_type = :t"
                " AND (target = 'all' OR conversation_id = :c)"
                " ORDER BY target = 'specific' DESC, created_at LIMIT 1"
            ),
            {"a": account_id, "t": conversation_type, "c": conversation_id},
        )
        .mappings()
        .first()
    )
    return Route.model_validate(dict(row)) if row else None


def account_is_live(account: Account) -> bool:
    return account.connection_intent == "connected" and account.authorization == "ready"
