"""Who is asking, and may they: a signed session cookie names the operator (their role is read
from the store on each request, so disabling or demoting takes effect at once), and every form
that changes something carries the session's CSRF token."""

from __future__ import annotations

import hmac
import os
import secrets
import time
from collections import deque
from pathlib import Path

from starlette.exceptions import HTTPException
from starlette.requests import Request

from runtime.errors import KefuError
from runtime.operators.accounts import Operator, Role, operator_named
from runtime.store import DeliveryStore, now_ms

SECRET_FILE = "console-secret"


def session_secret(data_dir: Path) -> str:
    """The key that signs session cookies, made once per data dir and kept (mode 0600): a
    restart keeps operators logged in, and nothing else can mint a session."""
    path = data_dir / SECRET_FILE
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        draft = data_dir / f".{SECRET_FILE}.{os.getpid()}"
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(secrets.token_urlsafe(32))
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(draft, path)  # whole or not at all; a second console starting at once keeps the first key
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    secret = path.read_text().strip()
    if len(secret) < 32:
        raise KefuError(
            "KEFU_CONSOLE_SECRET_INVALID",
            f"{path} holds no usable key (shorter than 32 characters)",
            "delete it: the console makes a new one (every operator signs in again)",
        )
    return secret


def sign_in(request: Request, operator: Operator) -> None:
    request.session.clear()  # a new session (and CSRF token) for a new sign-in
    request.session.update(operator=operator.name, credential=operator.credential, since=now_ms())


def signed_in(request: Request, store: DeliveryStore) -> Operator | None:
    """The session's operator while they are enabled, their password is the one they signed in
    with and they have not signed out since: a disabled operator, a changed password or a sign
    out ends every session at its next request, a copied cookie too."""
    name, since = request.session.get("operator"), request.session.get("since")
    operator = operator_named(store, name) if isinstance(name, str) else None
    if operator is None or not hmac.compare_digest(operator.credential, str(request.session.get("credential"))):
        return None
    if not isinstance(since, int) or since <= operator.signed_out_at:
        return None
    return operator


class SignInThrottle:
    """After `limit` failed sign-ins as one name from one address within `window_s`, that pair
    waits until its oldest failure leaves the window. Another address is not held up, so a
    guesser elsewhere cannot lock an operator out (behind a proxy, name it in
    KEFU_CONSOLE__TRUSTED_PROXIES so the client's address is seen). Every attempt counts as failed until it succeeds, so
    concurrent guesses cannot slip past the limit. This process's memory, bounded: a restart
    forgets, which scrypt's cost per guess still makes slow."""

    MAX_KEYS = 10_000

    def __init__(self, limit: int = 5, window_s: float = 300.0) -> None:
        self.limit, self.window_s = limit, window_s
        self.failures: dict[str, deque[float]] = {}

    def begin(self, name: str, address: str) -> str:
        """Refuse (429) while the pair is throttled; else count the attempt, and return its key."""
        key, now = f"{address}\0{name[:64]}", time.monotonic()
        failures = self.failures.get(key, deque())
        while failures and failures[0] <= now - self.window_s:
            failures.popleft()
        if len(failures) >= self.limit:
            wait = int(failures[0] + self.window_s - now) + 1
            raise HTTPException(429, f"KEFU_SIGN_IN_THROTTLED: too many failed sign-ins; try again in {wait} s")
        failures.append(now)
        self.failures.pop(key, None)
        self.failures[key] = failures  # newest last: the oldest keys go first when there are too many
        while len(self.failures) > self.MAX_KEYS:
            del self.failures[next(iter(self.failures))]
        return key

    def succeeded(self, key: str) -> None:
        self.failures.pop(key, None)


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
