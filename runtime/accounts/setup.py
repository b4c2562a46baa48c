"""Adding an account in two steps (SPEC 3.1): preview, then confirm.

Preview verifies the platform identity through the transport and persists nothing: the setup
material (credentials included) stays in this process's memory for at most the setup TTL.
Confirm saves the account and its credentials in one transaction under an operation id, so a
confirm whose answer was lost can be replayed and returns the same account.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runtime.accounts.credentials import save_credentials
from runtime.accounts.registry import AccountSpec, identity_clash, insert_account
from runtime.errors import KefuError
from runtime.placement.operations import run_once, stored_result
from runtime.store import DeliveryStore
from runtime.store.tables import Account


class SetupExpired(KefuError):
    def __init__(self, setup_id: str) -> None:
        super().__init__(
            "KEFU_SETUP_EXPIRED",
            f"setup {setup_id!r} is unknown or older than the setup TTL; nothing was saved",
            "run the preview again",
        )


@dataclass(frozen=True)
class SetupPreview:
    setup_id: str
    spec: AccountSpec
    expires_in_s: float


@dataclass
class _Pending:
    spec: AccountSpec
    credentials: dict[str, Any] = field(repr=False)
    expires_at: float = 0.0


class AccountSetups:
    def __init__(self, ttl_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl_s = ttl_ms / 1000
        self._clock = clock
        self._pending: dict[str, _Pending] = {}

    def preview(
        self, store: DeliveryStore, spec: AccountSpec, credentials: dict[str, Any], verify: Callable[[], None]
    ) -> SetupPreview:
        """`verify` raises when the platform refuses the identity. Nothing is written."""
        self._forget_expired()
        with store.read() as conn:
            identity_clash(conn, spec)
        verify()
        setup_id = uuid.uuid4().hex
        self._pending[setup_id] = _Pending(spec, credentials, self._clock() + self._ttl_s)
        return SetupPreview(setup_id, spec, self._ttl_s)

    def confirm(self, store: DeliveryStore, setup_id: str, op_id: str) -> Account:
        self._forget_expired()
        pending = self._pending.get(setup_id)
        with store.write() as conn:

            def create() -> dict[str, Any]:
                if pending is None:
                    raise SetupExpired(setup_id)
                account = insert_account(conn, pending.spec)
                save_credentials(conn, account.id, pending.credentials)
                return account.model_dump()

            account = Account.model_validate(
                run_once(conn, op_id, "account.create", pending.spec.id if pending else None, create)
            )
        self._pending.pop(setup_id, None)
        return account

    def _forget_expired(self) -> None:
        now = self._clock()
        for setup_id in [s for s, p in self._pending.items() if p.expires_at <= now]:
            del self._pending[setup_id]


def replayed_account(store: DeliveryStore, op_id: str, account_id: str) -> Account | None:
    """The account an earlier confirm under this operation id saved, if any (another account's
    under it is KEFU_OPERATION_CONFLICT)."""
    with store.read() as conn:
        result = stored_result(conn, op_id, "account.create", account_id)
    return None if result is None else Account.model_validate(result)
