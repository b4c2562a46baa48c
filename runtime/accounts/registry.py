"""Accounts: the minimum the pipeline needs (account operations in depth come later)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from runtime.accounts.credentials import save_credentials
from runtime.errors import AccountUnknown, KefuError
from runtime.placement.operations import run_once
from runtime.store import DeliveryStore, now_ms
from runtime.store.connection import Connection
from runtime.store.sql import sql
from runtime.store.tables import Account, insert_row


class AccountSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=128)
    platform: Literal["dingtalk", "wangwang", "simulator"]
    identity: str = Field(min_length=1, max_length=256)
    workspace: str = "default"


_DELETED = "#deleted:"  # what a deleted account's identity carries, so the identity is free again


def identity_clash(conn: Connection, spec: AccountSpec) -> None:
    """Raise KEFU_ACCOUNT_EXISTS if the id or the platform identity is already configured. A
    deleted account's id is free for the same platform identity: adding it again restores it."""
    clash = conn.execute(
        sql(
            "SELECT id FROM account WHERE (id = :id AND NOT (deleted_at IS NOT NULL AND platform = :platform"
            " AND substr(identity, 1, length(:identity) + :n) = :identity || :deleted))"
            " OR (platform = :platform AND identity = :identity)"
        ),
        {"id": spec.id, "platform": spec.platform, "identity": spec.identity, "deleted": _DELETED, "n": len(_DELETED)},
    ).first()
    if clash is not None:
        raise KefuError(
            "KEFU_ACCOUNT_EXISTS",
            f"account {clash[0]!r} already holds this id or {spec.platform} identity"
            " (a deleted account's id is free only for its own identity)",
            "reuse that account, delete it first, or choose another id",
        )


def insert_account(conn: Connection, spec: AccountSpec) -> Account:
    """A new account, or a deleted one of the same identity restored (seed 001: restoring keeps
    the id and the history; its routes were deleted with it, so it listens once a route exists)."""
    identity_clash(conn, spec)
    deleted = load_account(conn, spec.id)
    if deleted is not None:
        conn.execute(
            sql(
                "UPDATE account SET identity = :identity, workspace = :workspace, deleted_at = NULL,"
                " connection_intent = 'connected', authorization = 'ready', last_error = NULL,"
                " revision = revision + 1 WHERE id = :id"
            ),
            spec.model_dump(),
        )
        restored = load_account(conn, spec.id)
        assert restored is not None
        return restored
    row = Account(**spec.model_dump(), simulated=spec.platform == "simulator", created_at=now_ms())
    insert_row(conn, row)
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


def account_at(conn: Connection, account_id: str, expected_revision: int) -> Account:
    """The live account, if it is still at the revision the operator looked at."""
    account = require_account(conn, account_id)
    if account.revision != expected_revision:
        raise KefuError(
            "KEFU_REVISION_CONFLICT",
            f"account {account_id!r} is at revision {account.revision}, not {expected_revision}; nothing was changed",
            "look at the account again and retry with its current revision",
        )
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
            account = account_at(conn, account_id, expected_revision)
            at = now_ms()
            conn.execute(
                sql(
                    "UPDATE account SET deleted_at = :at, connection_intent = 'disconnected',"
                    " identity = identity || :deleted || :at, revision = revision + 1 WHERE id = :a"
                ),
                {"at": at, "a": account_id, "deleted": _DELETED},
            )
            conn.execute(sql("DELETE FROM route WHERE account_id = :a"), {"a": account_id})
            conn.execute(sql("DELETE FROM credential WHERE account_id = :a"), {"a": account_id})
            return {"revision": account.revision + 1}

        revision: int = run_once(conn, op_id, "account.delete", delete)["revision"]
        return revision


def renew_account(
    store: DeliveryStore, account_id: str, expected_revision: int, credentials: dict[str, Any], op_id: str
) -> int:
    """Install credentials the platform just accepted for the account's own identity (seed 001
    `renewAccount`; the caller verified them), as of the revision the operator saw: a pause or
    a disconnect that came in between wins. Routes, history, cursors and the connection intent
    stay; the revision moves, so the listener restarts on the new credentials, and an
    authorization the platform had refused is tried again. Returns the new revision."""
    with store.write() as conn:

        def renew() -> dict[str, Any]:
            account = account_at(conn, account_id, expected_revision)
            save_credentials(conn, account_id, credentials)
            conn.execute(
                sql(
                    "UPDATE account SET revision = revision + 1, authorization = 'ready', last_error = NULL"
                    " WHERE id = :a"
                ),
                {"a": account_id},
            )
            return {"revision": account.revision + 1}

        revision: int = run_once(conn, op_id, "account.renew", renew)["revision"]
        return revision
