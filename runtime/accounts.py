"""Accounts: the minimum the pipeline needs (account operations in depth come later)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from runtime.errors import AccountUnknown, KefuError
from runtime.operations import run_once
from runtime.store import DeliveryStore, now_ms
from runtime.store.connection import Connection
from runtime.store.sql import sql
from runtime.store.tables import Account, AccountTable, table_of


class AccountSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=128)
    platform: Literal["dingtalk", "wangwang", "simulator"]
    identity: str = Field(min_length=1, max_length=256)
    workspace: str = "default"


def identity_clash(conn: Connection, spec: AccountSpec) -> None:
    """Raise KEFU_ACCOUNT_EXISTS if the id or the platform identity is already configured."""
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


def insert_account(conn: Connection, spec: AccountSpec) -> Account:
    identity_clash(conn, spec)
    row = Account(**spec.model_dump(), simulated=spec.platform == "simulator", created_at=now_ms())
    conn.execute(table_of(AccountTable).insert().values(**row.model_dump()))
    return row


def create_account(store: DeliveryStore, spec: AccountSpec) -> Account:
    with store.write() as conn:
        return insert_account(conn, spec)


def load_account(conn: Connection, account_id: str) -> Account | None:
    row = conn.execute(sql("SELECT * FROM account WHERE id = :id"), {"id": account_id}).mappings().first()
    return Account.model_validate(dict(row)) if row else None


def require_account(conn: Connection, account_id: str) -> Account:
    """A live (not deleted) account."""
    account = load_account(conn, account_id)
    if account is None or account.deleted_at is not None:
        raise AccountUnknown(account_id)
    return account


def list_accounts(store: DeliveryStore) -> list[Account]:
    with store.read() as conn:
        rows = conn.execute(sql("SELECT * FROM account WHERE deleted_at IS NULL ORDER BY id")).mappings()
        return [Account.model_validate(dict(row)) for row in rows]


def account_ids(conn: Connection) -> list[str]:
    return list(conn.execute(sql("SELECT id FROM account WHERE deleted_at IS NULL ORDER BY id")).scalars())


def account_is_live(account: Account) -> bool:
    return account.connection_intent == "connected" and account.authorization == "ready"


def listening_accounts(conn: Connection) -> list[Account]:
    """Accounts that should have a listener now (SPEC 3.1): connected, authorised, with at
    least one enabled route to deliver to, and not in a move (SPEC 3.12)."""
    rows = conn.execute(
        sql(
            "SELECT * FROM account a WHERE a.connection_intent = 'connected' AND a.authorization = 'ready'"
            " AND EXISTS (SELECT 1 FROM route r WHERE r.account_id = a.id AND r.enabled)"
            # an account on its way to or from another shard listens nowhere until it arrives
            " AND NOT EXISTS (SELECT 1 FROM account_placement p WHERE p.account_id = a.id AND p.state != 'active')"
            " ORDER BY a.id"
        )
    ).mappings()
    return [Account.model_validate(dict(row)) for row in rows]


def set_connection_intent(store: DeliveryStore, account_id: str, intent: Literal["connected", "disconnected"]) -> int:
    """Connect or disconnect an account (its listener follows). Connecting also clears an
    authorization the platform refused, so the listener tries the credentials again. Returns
    the account's revision, bumped only when something changed, so repeating it is harmless."""
    with store.write() as conn:
        account = require_account(conn, account_id)
        retry_authorization = intent == "connected" and account.authorization == "failed"
        if account.connection_intent == intent and not retry_authorization:
            return account.revision
        conn.execute(
            sql(
                "UPDATE account SET connection_intent = :i, revision = revision + 1,"
                " authorization = CASE WHEN :retry THEN 'ready' ELSE authorization END WHERE id = :a"
            ),
            {"i": intent, "retry": retry_authorization, "a": account_id},
        )
        return account.revision + 1


def delete_account(store: DeliveryStore, account_id: str, expected_revision: int, op_id: str) -> int:
    """Delete an account as of the revision the operator saw: its listener stops (it is no
    longer connected), its routes and credentials go, its history stays with a tombstone, and
    its platform identity may be added again. Returns the tombstone's revision."""
    with store.write() as conn:

        def delete() -> dict[str, Any]:
            account = require_account(conn, account_id)
            if account.revision != expected_revision:
                raise KefuError(
                    "KEFU_REVISION_CONFLICT",
                    f"account {account_id!r} is at revision {account.revision}, not {expected_revision}",
                    "look at the account again and retry with its current revision",
                )
            at = now_ms()
            conn.execute(
                sql(
                    "UPDATE account SET deleted_at = :at, connection_intent = 'disconnected',"
                    " identity = identity || '#deleted:' || :at, revision = revision + 1 WHERE id = :a"
                ),
                {"at": at, "a": account_id},
            )
            conn.execute(sql("DELETE FROM route WHERE account_id = :a"), {"a": account_id})
            conn.execute(sql("DELETE FROM credential WHERE account_id = :a"), {"a": account_id})
            return {"revision": account.revision + 1}

        revision: int = run_once(conn, op_id, "account.delete", delete)["revision"]
        return revision
