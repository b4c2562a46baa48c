"""The DingTalk OpenAPI over httpx: access tokens, robot sends, media upload, read status.

A send's failure is classified for the outbox (runtime.outbox.requests.SendFailure):
- the request never left (connection refused, connect timeout), throttling, a flow-controlled
  recipient, or a failed media upload: `not-submitted`, safe to retry;
- a timeout or a dropped connection after the request left, or a 5xx: `unknown`, never resent;
- anything else the platform refused (bad parameters, an invalid recipient, credentials that
  stay unauthorised after one token refresh): `rejected`.
Codes are DingTalk's own error codes with a `DINGTALK_` prefix; bodies are never kept.

A 1:1 reply to a user without a staff id (recipient REPLY_WEBHOOK, runtime.outbox.recipients) is
posted to the conversation's session webhook instead: no token, `{msgtype, text|markdown}`,
answered `{errcode, errmsg}`. Without a webhook still valid, nothing is sent
(DINGTALK_RECIPIENT_UNAVAILABLE, rejected). Such a send has no processQueryKey, so no read status:
its platform id is `session-webhook:<request id>`. The webhook URL is a credential: it appears in
no log line, error or code.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from typing import Any

import httpx

from config import DingTalkSettings
from config.retries import FLOW_CONTROL_HINT_S, THROTTLED_HINT_S
from runtime.outbox.recipients import DINGTALK_RECIPIENT_UNAVAILABLE, REPLY_WEBHOOK, REPLY_WEBHOOK_MARGIN_MS
from runtime.ports import MediaFetchFailure, MediaTooLarge, OutboundSend, SendFailure, SendReceipt
from transports.dingtalk.credentials import DingTalkCredentials

AUTH_FAILED = "DINGTALK_AUTH_FAILED"  # a refused access token (and the Stream's refusal): the credentials are wrong
TOKEN_UNAVAILABLE = "DINGTALK_TOKEN_UNAVAILABLE"  # the token endpoint failed (a 5xx): asked again later

# httpx logs each request's URL at INFO, and a media upload carries the access token in its URL.
logging.getLogger("httpx").setLevel(logging.WARNING)

TOKEN_MARGIN_S = 300  # refresh this long before DingTalk says the token expires
THROTTLE_CODES = ("Forbidden.AccessDenied.QpsLimitForAppkeyAndApi", "130101", "410100")


def _platform_code(response: httpx.Response) -> str:
    try:
        code = response.json().get("code")
    except (ValueError, AttributeError):
        code = None
    return str(code) if code is not None else f"HTTP_{response.status_code}"


def _safe(code: str) -> str:
    return "DINGTALK_" + re.sub(r"[^A-Za-z0-9_.]", "_", code)[:80]


def classify(response: httpx.Response) -> SendFailure | None:
    """None for a 2xx; otherwise the failure the outbox should record."""
    if response.is_success:
        return None
    code = _platform_code(response)
    if response.status_code == 429 or code in THROTTLE_CODES or code.startswith("Forbidden.AccessDenied.QpsLimit"):
        retry = response.headers.get("Retry-After", "")
        return SendFailure("not-submitted", "DINGTALK_THROTTLED", float(retry) if retry.isdigit() else THROTTLED_HINT_S)
    if response.status_code >= 500:
        return SendFailure("unknown", _safe(code))
    return SendFailure("rejected", _safe(code))


# Markdown a reply would lose as plain text: a heading, a list, a quote, bold, code or a link.
_MARKDOWN = re.compile(r"(?m)^(#{1,6} |[-*+] |\d+\. |> )|\*\*[^*\n]+\*\*|`[^`\n]+`|\[[^\]\n]+\]\([^)\s]+\)")
_MARKUP = re.compile(r"[#*`>\[\]]|\(http\S*\)")


def _title(text: str) -> str:
    """The markdown message's title (DingTalk shows it in the chat list): its first line, plain."""
    first = next((line for line in text.splitlines() if line.strip()), text)
    return _MARKUP.sub("", first).strip()[:30] or "消息"


class DingTalkOpenAPI:
    def __init__(self, settings: DingTalkSettings, http: httpx.Client | None = None) -> None:
        self._settings = settings
        self._http = http or httpx.Client(timeout=settings.timeout_s)
        self._tokens: dict[str, tuple[str, float]] = {}  # client id -> (token, monotonic expiry)
        self._lock = threading.Lock()

    def close(self) -> None:
        self._http.close()

    # -- tokens ----------------------------------------------------------------------------

    def access_token(self, credentials: DingTalkCredentials, refresh: bool = False) -> str:
        """Cached until DingTalk's expiry minus five minutes."""
        with self._lock:
            cached = self._tokens.get(credentials.client_id)
            if cached is not None and not refresh and time.monotonic() < cached[1]:
                return cached[0]
        try:
            response = self._http.post(
                f"{self._settings.openapi_url}/v1.0/oauth2/accessToken",
                json={"appKey": credentials.client_id, "appSecret": credentials.client_secret.get_secret_value()},
            )
        except httpx.TransportError as error:
            raise SendFailure("not-submitted", f"DINGTALK_UNREACHABLE_{type(error).__name__}") from None
        failure = classify(response)  # None for a 2xx
        if failure is not None and failure.kind == "rejected":
            raise SendFailure("rejected", AUTH_FAILED)
        if failure is not None:  # throttled (its hint kept) or DingTalk failing: nothing was sent, ask again
            code = failure.code if failure.kind == "not-submitted" else TOKEN_UNAVAILABLE
            raise SendFailure("not-submitted", code, failure.retry_after_s)
        body = response.json()
        token, expires_in = body.get("accessToken"), body.get("expireIn")
        if not isinstance(token, str) or not isinstance(expires_in, int):
            raise SendFailure("not-submitted", "DINGTALK_TOKEN_MALFORMED")
        with self._lock:
            self._tokens[credentials.client_id] = (token, time.monotonic() + expires_in - TOKEN_MARGIN_S)
        return token

    def _call(self, credentials: DingTalkCredentials, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """One API call with the cached token, refreshed once if DingTalk says it is invalid."""
        for attempt in range(2):
            headers = {"x-acs-dingtalk-access-token": self.access_token(credentials, refresh=attempt == 1)}
            try:
                response = self._http.request(method, url, headers=headers, **kwargs)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as error:
                raise SendFailure("not-submitted", f"DINGTALK_UNREACHABLE_{type(error).__name__}") from None
            except httpx.TransportError as error:  # the request may have reached DingTalk
                raise SendFailure("unknown", f"DINGTALK_NO_RESPONSE_{type(error).__name__}") from None
            if response.status_code == 401 or _platform_code(response) == "InvalidAuthentication":
                if attempt == 0:
                    continue
                raise SendFailure("rejected", AUTH_FAILED)
            return response
        raise AssertionError("unreachable")

    # -- sending ---------------------------------------------------------------------------

    def send(self, credentials: DingTalkCredentials, message: OutboundSend) -> SendReceipt:
        if message.recipient_id == REPLY_WEBHOOK:
            return self.send_to_session(message)
        msg_key, param = self._content(credentials, message)
        body: dict[str, Any] = {"robotCode": credentials.robot_code, "msgKey": msg_key, "msgParam": json.dumps(param)}
        if message.recipient_id is not None:  # 1:1
            path, body["userIds"] = "/v1.0/robot/oToMessages/batchSend", [message.recipient_id]
        else:
            path, body["openConversationId"] = "/v1.0/robot/groupMessages/send", message.conversation_id
        response = self._call(credentials, "POST", f"{self._settings.openapi_url}{path}", json=body)
        if failure := classify(response):
            raise failure
        result = response.json()
        if message.recipient_id in (result.get("invalidStaffIdList") or []):
            raise SendFailure("rejected", "DINGTALK_INVALID_RECIPIENT")
        if message.recipient_id in (result.get("flowControlledStaffIdList") or []):
            raise SendFailure("not-submitted", "DINGTALK_FLOW_CONTROLLED", FLOW_CONTROL_HINT_S)
        key = result.get("processQueryKey")
        if not isinstance(key, str) or not key:
            raise SendFailure("unknown", "DINGTALK_NO_PROCESS_QUERY_KEY")
        return SendReceipt(platform_message_id=key)

    def send_to_session(self, message: OutboundSend) -> SendReceipt:
        """Post a reply to the conversation's session webhook (`message.reply_webhook`). Checked
        before any request: a webhook that is missing or about to expire, one that is not
        DingTalk's (`is_session_webhook`: a forged callback may name any URL), or media (a session
        webhook takes text and markdown, not kefu's uploaded files), sends nothing."""
        hook = message.reply_webhook
        if hook is None or hook.expires_at.timestamp() * 1000 - REPLY_WEBHOOK_MARGIN_MS <= time.time() * 1000:
            raise SendFailure("rejected", DINGTALK_RECIPIENT_UNAVAILABLE)
        if not self.is_session_webhook(hook.url):
            raise SendFailure("rejected", "DINGTALK_SESSION_WEBHOOK_NOT_DINGTALK")
        if message.media is not None:
            raise SendFailure("rejected", "DINGTALK_SESSION_WEBHOOK_MEDIA_UNSUPPORTED")
        body: dict[str, Any]
        if _MARKDOWN.search(message.text):
            body = {"msgtype": "markdown", "markdown": {"title": _title(message.text), "text": message.text}}
        else:
            body = {"msgtype": "text", "text": {"content": message.text}}
        try:
            response = self._http.post(hook.url, json=body)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as error:
            raise SendFailure("not-submitted", f"DINGTALK_UNREACHABLE_{type(error).__name__}") from None
        except httpx.TransportError as error:  # the post may have reached DingTalk
            raise SendFailure("unknown", f"DINGTALK_NO_RESPONSE_{type(error).__name__}") from None
        if failure := classify(response):
            raise failure
        try:
            errcode = str(response.json().get("errcode", 0))
        except (ValueError, AttributeError):
            raise SendFailure("unknown", "DINGTALK_SESSION_WEBHOOK_MALFORMED") from None
        if errcode in THROTTLE_CODES:
            raise SendFailure("not-submitted", "DINGTALK_THROTTLED", THROTTLED_HINT_S)
        if errcode != "0":
            raise SendFailure("rejected", _safe(f"SESSION_WEBHOOK_{errcode}"))
        return SendReceipt(platform_message_id=f"session-webhook:{message.request_id}")

    def is_session_webhook(self, url: str) -> bool:
        """DingTalk's session webhook: its robot `sendBySession` endpoint at the OpenAPI's own
        origin (KEFU_DINGTALK__OAPI_URL: https://oapi.dingtalk.com), nowhere else. The request
        follows no redirect (httpx's default), so it cannot be led elsewhere either."""
        hook, oapi = httpx.URL(url), httpx.URL(self._settings.oapi_url)
        same_origin = (hook.scheme, hook.host, hook.port) == (oapi.scheme, oapi.host, oapi.port)
        return same_origin and hook.path == oapi.path.rstrip("/") + "/robot/sendBySession" and not hook.userinfo

    def _content(self, credentials: DingTalkCredentials, message: OutboundSend) -> tuple[str, dict[str, str]]:
        media = message.media
        if media is None and _MARKDOWN.search(message.text):  # DingTalk renders it: headings, lists, bold, links
            return "sampleMarkdown", {"title": _title(message.text), "text": message.text}
        if media is None:
            return "sampleText", {"content": message.text}
        media_id = self.upload(credentials, media.kind, media.file_name, media.mime, media.data)
        if media.kind == "image":
            return "sampleImageMsg", {"photoURL": media_id}
        file_type = media.file_name.rsplit(".", 1)[-1].lower() if "." in media.file_name else "file"
        return "sampleFile", {"mediaId": media_id, "fileName": media.file_name, "fileType": file_type}

    def upload(self, credentials: DingTalkCredentials, kind: str, name: str, mime: str, data: bytes) -> str:
        """The media id of an uploaded file. Nothing reached the buyer yet, so any failure here
        leaves the send safe to retry."""
        token = self.access_token(credentials)
        try:
            response = self._http.post(
                f"{self._settings.oapi_url}/media/upload",
                params={"access_token": token},
                data={"type": "image" if kind == "image" else "file"},
                files={"media": (name, data, mime)},
            )
        except httpx.TransportError as error:
            raise SendFailure("not-submitted", f"DINGTALK_UPLOAD_{type(error).__name__}") from None
        body = response.json() if response.is_success else {}
        if body.get("errcode", 0) != 0 or not body.get("media_id"):
            raise SendFailure("not-submitted", _safe(f"UPLOAD_{body.get('errcode', response.status_code)}"))
        return str(body["media_id"])

    # -- a buyer's media -------------------------------------------------------------------

    def download(self, credentials: DingTalkCredentials, download_code: str, max_bytes: int) -> bytes:
        """A robot message's file by its `downloadCode`: DingTalk answers a short-lived URL,
        which is read up to `max_bytes` (MediaTooLarge past it)."""
        try:
            response = self._call(
                credentials,
                "POST",
                f"{self._settings.openapi_url}/v1.0/robot/messageFiles/download",
                json={"downloadCode": download_code, "robotCode": credentials.robot_code},
            )
        except SendFailure as failure:
            raise MediaFetchFailure(failure.code, transient=failure.kind != "rejected") from None
        if refused := classify(response):
            raise MediaFetchFailure(refused.code, transient=refused.kind != "rejected")
        url = response.json().get("downloadUrl")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise MediaFetchFailure("DINGTALK_NO_DOWNLOAD_URL", transient=False)
        try:
            with self._http.stream("GET", url) as download:
                if not download.is_success:
                    raise MediaFetchFailure(
                        f"DINGTALK_DOWNLOAD_HTTP_{download.status_code}", download.status_code >= 500
                    )
                declared = int(download.headers.get("Content-Length") or 0)
                if declared > max_bytes:
                    raise MediaTooLarge(declared)
                data = bytearray()
                for chunk in download.iter_bytes():
                    data += chunk
                    if len(data) > max_bytes:
                        raise MediaTooLarge(len(data))
                return bytes(data)
        except httpx.TransportError as error:
            raise MediaFetchFailure(f"DINGTALK_DOWNLOAD_{type(error).__name__}", transient=True) from None

    # -- read status -----------------------------------------------------------------------

    def read_by(self, credentials: DingTalkCredentials, process_query_key: str) -> dict[str, int]:
        """Who has read a 1:1 robot message (DingTalk answers within 24 h of the send): user
        id -> read time (ms). Raises SendFailure when DingTalk cannot answer now."""
        response = self._call(
            credentials,
            "GET",
            f"{self._settings.openapi_url}/v1.0/robot/oToMessages/readStatus",
            params={"robotCode": credentials.robot_code, "processQueryKey": process_query_key},
        )
        if failure := classify(response):
            raise failure
        readers = {}
        for info in response.json().get("messageReadInfoList") or []:
            if info.get("readStatus") == "READ" and isinstance(info.get("userId"), str):
                readers[info["userId"]] = int(info.get("readTimestamp") or 0)
        return readers
