"""HTTP-callback robots: DingTalk signs each request with the app secret.

sign = Base64(HmacSHA256(appSecret, timestamp + "\n" + appSecret)), sent in the `timestamp`
and `sign` headers. A request more than an hour off our clock is refused (a replayed capture).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

from runtime.errors import KefuError
from transports.dingtalk.robot import RobotMessage, parse_robot_message

MAX_SKEW_MS = 3_600_000


class CallbackRejected(KefuError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)


def callback_signature(timestamp: str, app_secret: str) -> str:
    digest = hmac.new(app_secret.encode(), f"{timestamp}\n{app_secret}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def verify_callback(headers: dict[str, str], body: bytes, app_secret: str, now_ms: int) -> RobotMessage:
    """The robot message of a genuine, fresh callback; CallbackRejected otherwise."""
    verify_signature(headers, app_secret, now_ms)
    return parse_callback(body)


def verify_signature(headers: dict[str, str], app_secret: str, now_ms: int) -> None:
    """The request's `timestamp` and `sign` headers are the app's and fresh: checked before its
    body is read (the signature covers the timestamp alone, as DingTalk signs it)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    timestamp, sign = lowered.get("timestamp", ""), lowered.get("sign", "")
    if not timestamp.isdigit() or not sign:
        raise CallbackRejected("DINGTALK_CALLBACK_UNSIGNED", "the timestamp and sign headers are required")
    if abs(now_ms - int(timestamp)) > MAX_SKEW_MS:
        raise CallbackRejected("DINGTALK_CALLBACK_STALE", "the timestamp is more than an hour off this host's clock")
    if not hmac.compare_digest(sign, callback_signature(timestamp, app_secret)):
        raise CallbackRejected("DINGTALK_CALLBACK_BAD_SIGNATURE", "the sign header does not match the app secret")


def parse_callback(body: bytes) -> RobotMessage:
    """The robot message a signed request's body holds; CallbackRejected when it is not JSON
    (nested past the parser's depth included) and PageRejected when it is not a message."""
    try:
        data: Any = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise CallbackRejected("DINGTALK_CALLBACK_MALFORMED", "the body is not JSON") from None
    return parse_robot_message(data)
