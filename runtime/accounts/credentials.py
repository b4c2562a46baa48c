"""Platform credentials (SPEC 2): kept apart from accounts, never logged, never in a page, a
task argument or a checkpoint. Stored as JSON in the owner-only delivery store; each transport
validates them into its own model with `SecretStr` fields."""

from __future__ import annotations

import json
from typing import Any

from runtime.errors import KefuError
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection


class CredentialsMissing(KefuError):
    def __init__(self, account_id: str) -> None:
        super().__init__(
            "KEFU_CREDENTIALS_MISSING",
            f"account {account_id!r} has no stored credentials",
            "add the account again with `kefu accounts add`",
        )


def save_credentials(conn: Connection, account_id: str, secret: dict[str, Any]) -> None:
    """Inside the caller's transaction, so an account and its credentials commit together."""
    conn.execute(
        queries.credential.SAVE,
        {"a": account_id, "s": json.dumps(secret, ensure_ascii=False), "at": now_ms()},
    )


def stored_secret(conn: Connection, account_id: str) -> str | None:
    """The credentials as stored (JSON text): what a move hands to the account's new shard."""
    secret: str | None = conn.execute(queries.credential.SECRET, {"a": account_id}).scalar_one_or_none()
    return secret


def load_credentials(store: DeliveryStore, account_id: str) -> dict[str, Any]:
    with store.read() as conn:
        secret = stored_secret(conn, account_id)
    if secret is None:
        raise CredentialsMissing(account_id)
    credentials: dict[str, Any] = json.loads(secret)
    return credentials
