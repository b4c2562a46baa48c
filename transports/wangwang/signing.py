"""TOP-style request signing for the Wangwang gateway (docs/wangwang-gateway.md)."""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime, timedelta, timezone
from typing import Literal

SignMethod = Literal["hmac-sha256", "md5"]
CHINA = timezone(timedelta(hours=8))
MAX_SKEW = timedelta(minutes=10)


def sign(params: dict[str, str], secret: str, method: SignMethod) -> str:
    """Over every parameter but `sign`, sorted by name, as name+value."""
    text = "".join(f"{k}{params[k]}" for k in sorted(params) if k != "sign")
    if method == "md5":
        return hashlib.md5(f"{secret}{text}{secret}".encode()).hexdigest().upper()
    return hmac.new(secret.encode(), text.encode(), hashlib.sha256).hexdigest().upper()


def timestamp(at: datetime) -> str:
    return at.astimezone(CHINA).strftime("%Y-%m-%d %H:%M:%S")


def check(params: dict[str, str], secret: str, now: datetime) -> str | None:
    """None for a genuine and fresh request, else the gateway's error code."""
    method = params.get("sign_method", "")
    if method not in ("hmac-sha256", "md5"):
        return "INVALID_PARAMETER"
    # mypy does not narrow a str to SignMethod by `in`: checked just above.
    if not hmac.compare_digest(params.get("sign", ""), sign(params, secret, method)):  # type: ignore[arg-type]
        return "INVALID_SIGNATURE"
    try:
        sent = datetime.strptime(params.get("timestamp", ""), "%Y-%m-%d %H:%M:%S").replace(tzinfo=CHINA)
    except ValueError:
        return "INVALID_PARAMETER"
    return "TIMESTAMP_OUT_OF_RANGE" if abs(now - sent) > MAX_SKEW else None
