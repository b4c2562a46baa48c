"""Accounts: the minimum the pipeline needs (account operations in depth come later)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from runtime.accounts.credentials import save_credentials
from runtime.errors import AccountUnknown, KefuError
from runtime.placement.operations import run_once
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection
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
        queries.account.IDENTITY_CLASH,
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
        conn.execute(queries.account.RESTORE, spec.model_dump())
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
    row = conn.execute(queries.account.BY_ID, {"id": account_id}).mappings().first()
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
        rows = conn.execute(queries.account.LIVE).mappings()
        return [Account.model_validate(dict(row)) for row in rows]


def account_ids(conn: Connection) -> list[str]:
    return list(conn.execute(queries.account.LIVE_IDS).scalars())


def account_is_live(account: Account) -> bool:
    return account.connection_intent == "connected" and account.authorization == "ready"


def listening_accounts(conn: Connection) -> list[Account]:
    """Accounts that should have a listener now (SPEC 3.1): connected, authorised, with at
    least one enabled route to deliver to (one that only observes too: SPEC 3.1's observation
    lease), and not in a move (SPEC 3.12)."""
    rows = conn.execute(queries.account.LISTENING).mappings()
    return [Account.model_validate(dict(row)) for row in rows]


def set_connection_intent(
    store: DeliveryStore, account_id: str, intent: Literal["connected", "disconnected"], op_id: str | None = None
) -> int:
    """Connect or disconnect an account (its listener follows). Connecting also clears an
    authorization the platform refused, so the listener tries the credentials again. Returns
    the account's revision, bumped only when something changed, so repeating it is harmless.
    Under an `op_id` (SPEC 3.1) the result is stored with the change: the same id again returns
    it (also once a later change moved the account on), and never changes anything."""
    kind = "account.resume" if intent == "connected" else "account.pause"
    with store.write() as conn:

        def change() -> dict[str, Any]:
            account = require_account(conn, account_id)
            retry_authorization = intent == "connected" and account.authorization == "failed"
            if account.connection_intent == intent and not retry_authorization:
                return {"account_id": account_id, "connection_intent": intent, "revision": account.revision}
            conn.execute(
                queries.account.SET_CONNECTION_INTENT, {"i": intent, "retry": retry_authorization, "a": account_id}
            )
            return {"account_id": account_id, "connection_intent": intent, "revision": account.revision + 1}

        result = change() if op_id is None else run_once(conn, op_id, kind, account_id, change)
        revision: int = result["revision"]
        return revision


def delete_account(store: DeliveryStore, account_id: str, expected_revision: int, op_id: str) -> int:
    """Delete an account as of the revision the operator saw: its listener stops (it is no
    longer connected), its routes and credentials go, its history stays with a tombstone, and
    its platform identity may be added again. Returns the tombstone's revision."""
    with store.write() as conn:

        def delete() -> dict[str, Any]:
            account = account_at(conn, account_id, expected_revision)
            at = now_ms()
            conn.execute(queries.account.MARK_DELETED, {"at": at, "a": account_id, "deleted": _DELETED})
            conn.execute(queries.route.DELETE_OF_ACCOUNT, {"a": account_id})
            conn.execute(queries.credential.DELETE_OF_ACCOUNT, {"a": account_id})
            return {"revision": account.revision + 1}

        revision: int = run_once(conn, op_id, "account.delete", account_id, delete)["revision"]
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
            conn.execute(queries.account.RENEW, {"a": account_id})
            return {"revision": account.revision + 1}

        revision: int = run_once(conn, op_id, "account.renew", account_id, renew)["revision"]
        return revision
