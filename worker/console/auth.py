"""Who is asking, and may they: a signed session cookie names the operator (their role is read
from the store on each request, so disabling or demoting takes effect at once), and every form
that changes something carries the session's CSRF token."""

from __future__ import annotations

import hmac
import secrets
from pathlib import Path

from starlette.exceptions import HTTPException
from starlette.requests import Request

from runtime.operators import Operator, Role, operator_named
from runtime.store import DeliveryStore

SECRET_FILE = "console-secret"


def session_secret(data_dir: Path) -> str:
    """The key that signs session cookies, made once per data dir and kept (mode 0600): a
    restart keeps operators logged in, and nothing else can mint a session."""
    path = data_dir / SECRET_FILE
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(32))
    return path.read_text().strip()


def signed_in(request: Request, store: DeliveryStore) -> Operator | None:
    name = request.session.get("operator")
    return operator_named(store, name) if isinstance(name, str) else None


def csrf_token(request: Request) -> str:
    token = request.session.get("csrf")
    if not isinstance(token, str):
        token = request.session["csrf"] = secrets.token_urlsafe(24)
    return token


def check_csrf(request: Request, submitted: object) -> None:
    expected = request.session.get("csrf")
    if not (isinstance(expected, str) and isinstance(submitted, str) and hmac.compare_digest(expected, submitted)):
        raise HTTPException(403, "KEFU_CSRF_INVALID: the form is stale or came from another site; reload the page")


def require(operator: Operator | None, role: Role) -> Operator:
    if operator is None:
        raise HTTPException(401, "KEFU_NOT_SIGNED_IN: sign in first")
    if not operator.role.allows(role):
        needed = f"KEFU_ROLE_REQUIRED: this needs the {role} role; {operator.name} is a {operator.role}"
        raise HTTPException(403, needed)
    return operator
