"""Console operators (SPEC 1: operators watch and take over): accounts with a role, a password
kept only as a salted scrypt hash, and a record of every action an operator took.

Roles nest: a viewer reads and marks read for themself; an operator also takes over, hands
back, sends and settles; admin is kept for the console's account and input pages to come.
Who did what is kept in `operator_action`, and a manual message carries its sender's name
(shown as `[operator NAME from console]`).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import re
import secrets

from pydantic import BaseModel, Field

from runtime.errors import KefuError
from runtime.operators.roles import Role as Role  # the roles are named without loading the store (kefu --help)
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
_SCRYPT = {"n": 2**14, "r": 8, "p": 1}  # ~50 ms a check: cheap for a login, dear for a guesser
MIN_PASSWORD = 8


class Operator(BaseModel):
    name: str
    role: Role
    # Changes with the password: a session signed in under another one has ended. A digest of
    # the stored hash, never the hash itself; not listed.
    credential: str = Field("", exclude=True)
    # When they last signed out (ms): a session signed in before has ended, every copy of its cookie.
    signed_out_at: int = Field(0, exclude=True)


def _credential(password_hash: str) -> str:
    return hashlib.sha256(password_hash.encode()).hexdigest()[:16]


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, **_SCRYPT)
    return "scrypt$" + base64.b64encode(salt).decode() + "$" + base64.b64encode(digest).decode()


def _matches(password: str, stored: str) -> bool:
    scheme, salt, digest = stored.split("$")
    if scheme != "scrypt":
        return False
    computed = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), **_SCRYPT)
    return hmac.compare_digest(computed, base64.b64decode(digest))


def check_operator_name(name: str) -> None:
    """KEFU_OPERATOR_INVALID for a name no operator can have: checked before a password is asked."""
    if not _NAME.fullmatch(name):
        raise KefuError(
            "KEFU_OPERATOR_INVALID",
            f"operator name {name[:40]!r} is not 1-64 letters, digits, '.', '_', '@' or '-'",
            "choose a short login name such as alice",
        )


def add_operator(store: DeliveryStore, name: str, role: Role, password: str) -> Operator:
    """Create an operator, or set an existing one's role and password (KEFU_OPERATOR_INVALID
    for a bad name or a short password)."""
    check_operator_name(name)
    if len(password) < MIN_PASSWORD:
        raise KefuError(
            "KEFU_OPERATOR_INVALID",
            f"the password of {name} is shorter than {MIN_PASSWORD} characters",
            "choose a longer password",
        )
    with store.write() as conn:
        conn.execute(
            queries.operator.UPSERT,
            {"n": name, "r": role.value, "h": hash_password(password), "at": now_ms()},
        )
    return Operator(name=name, role=role)


@functools.cache
def _unknown_hash() -> str:
    return hash_password(secrets.token_urlsafe(16))


def authenticate(store: DeliveryStore, name: str, password: str) -> Operator | None:
    """The operator, if the password is theirs and they are not disabled. A wrong name costs
    the same hash as a wrong password, so a login does not tell which names exist."""
    with store.read() as conn:
        row = conn.execute(queries.operator.ENABLED_ROLE_AND_HASH, {"n": name}).first()
    if row is None:
        _matches(password, _unknown_hash())  # the same one scrypt run as for a known name
        return None
    matches = _matches(password, row[1])
    return Operator(name=name, role=Role(row[0]), credential=_credential(row[1])) if matches else None


def operator_named(store: DeliveryStore, name: str) -> Operator | None:
    """An enabled operator by name (a signed session names one: disabling them ends it)."""
    with store.read() as conn:
        row = conn.execute(queries.operator.ENABLED_BY_NAME, {"n": name}).first()
    if row is None:
        return None
    return Operator(name=name, role=Role(row[0]), credential=_credential(row[1]), signed_out_at=row[2])


def sign_out(store: DeliveryStore, name: str, at: int) -> None:
    """End every console session of the operator signed in before `at` (ms), wherever its
    cookie was copied to: a signed cookie alone cannot be taken back."""
    with store.write() as conn:
        conn.execute(queries.operator.SIGN_OUT, {"n": name, "at": at})


def disable_operator(store: DeliveryStore, name: str) -> bool:
    """The operator can no longer sign in, and their open sessions end at their next request
    (a session's role is read from here each time). False when no such enabled operator."""
    with store.write() as conn:
        changed = conn.execute(queries.operator.DISABLE, {"n": name, "at": now_ms()}).rowcount
    return bool(changed)


def list_operators(store: DeliveryStore) -> list[Operator]:
    with store.read() as conn:
        rows = conn.execute(queries.operator.ENABLED).all()
    return [Operator(name=name, role=Role(role)) for name, role in rows]


def record_action(
    store: DeliveryStore,
    operator: str,
    action: str,
    customer_id: int | None = None,
    request_id: str | None = None,
    detail: str | None = None,
) -> None:
    with store.write() as conn:
        record(conn, operator, action, customer_id, request_id, detail)


def record(
    conn: Connection,
    operator: str,
    action: str,
    customer_id: int | None = None,
    request_id: str | None = None,
    detail: str | None = None,
) -> None:
    """Inside the change's own transaction: the change and its record commit together or not at all."""
    conn.execute(
        queries.operator_action.RECORD,
        {"at": now_ms(), "o": operator, "a": action, "c": customer_id, "r": request_id, "d": detail},
    )
