"""Signed calls to a Wangwang bridge over httpx (docs/wangwang-gateway.md)."""

from __future__ import annotations

import ipaddress
import logging
from datetime import UTC, datetime
from typing import Literal, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from transports.wangwang.credentials import WangwangCredentials
from transports.wangwang.protocol import GatewayError
from transports.wangwang.signing import sign, timestamp

logging.getLogger("httpx").setLevel(logging.WARNING)  # never log request lines

Answer = TypeVar("Answer", bound=BaseModel)
AUTH_CODES = ("INVALID_SIGNATURE", "UNKNOWN_APP_KEY", "UNKNOWN_SELLER", "WANGWANG_PLAIN_HTTP_REFUSED")


class GatewayFailure(Exception):
    """A call that did not succeed. `stage`: `not-sent` (the bridge surely did nothing),
    `refused` (the bridge answered with an error: `code` is its code), or `no-answer` (the
    request left and no usable answer came back: it may have been carried out)."""

    def __init__(
        self, stage: Literal["not-sent", "refused", "no-answer"], code: str, retry_after_s: float | None = None
    ) -> None:
        super().__init__(f"{stage}: {code}")
        self.stage = stage
        self.code = code
        self.retry_after_s = retry_after_s

    @property
    def kefu_code(self) -> str:
        """The code as kefu records it: platform-named."""
        return self.code if self.code.startswith("WANGWANG_") else f"WANGWANG_{self.code}"

    @property
    def authorization(self) -> bool:
        """The account's settings are wrong (a refused signature, a bridge kefu will not talk
        to): trying again changes nothing until an operator renews them."""
        return self.stage != "no-answer" and self.code in AUTH_CODES


def plain_http_refused(gateway_url: str, plain_http_hosts: tuple[str, ...] = ()) -> bool:
    """Whether kefu must not call this bridge: over plain `http://` anyone on the path reads the
    signed requests and forges the answers (buyer text, download URLs), so only a bridge on this
    host, or one an operator listed in KEFU_WANGWANG__PLAIN_HTTP_HOSTS, is reached without TLS."""
    url = httpx.URL(gateway_url)
    host = url.host.lower()
    return url.scheme != "https" and not _loopback(host) and host not in plain_http_hosts


def _loopback(host: str) -> bool:
    """`localhost` or a loopback address (a name such as `127.example.com` is neither)."""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class GatewayClient:
    def __init__(
        self, timeout_s: float, http: httpx.Client | None = None, plain_http_hosts: tuple[str, ...] = ()
    ) -> None:
        self._timeout_s = timeout_s
        self._http = http or httpx.Client(timeout=timeout_s)
        self._plain_http_hosts = plain_http_hosts

    @property
    def http(self) -> httpx.Client:
        """The connection pool, for reading a download URL the bridge answered."""
        return self._http

    def close(self) -> None:
        self._http.close()

    def call(
        self,
        credentials: WangwangCredentials,
        method: str,
        params: dict[str, str],
        answer: type[Answer],
        timeout_s: float | None = None,
    ) -> Answer:
        if plain_http_refused(credentials.gateway_url, self._plain_http_hosts):
            raise GatewayFailure("not-sent", "WANGWANG_PLAIN_HTTP_REFUSED")
        signed = {
            **params,
            "method": method,
            "app_key": credentials.app_key,
            "seller_id": credentials.seller_id,
            "timestamp": timestamp(datetime.now(UTC)),
            "v": "1.0",
            "format": "json",
            "sign_method": credentials.sign_method,
        }
        signed["sign"] = sign(signed, credentials.app_secret.get_secret_value(), credentials.sign_method)
        try:
            response = self._http.post(
                f"{credentials.gateway_url.rstrip('/')}/router", data=signed, timeout=timeout_s or self._timeout_s
            )
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as error:
            raise GatewayFailure("not-sent", f"WANGWANG_UNREACHABLE_{type(error).__name__}") from None
        except httpx.TransportError as error:
            raise GatewayFailure("no-answer", f"WANGWANG_NO_RESPONSE_{type(error).__name__}") from None
        if response.status_code >= 500:
            raise GatewayFailure("no-answer", f"WANGWANG_HTTP_{response.status_code}")
        try:
            body = response.json()
            if "error_response" in body:
                refusal = GatewayError.model_validate(body["error_response"])
                raise GatewayFailure("refused", refusal.code, refusal.retry_after_s)
            key = method.removeprefix("kefu.wangwang.").replace(".", "_") + "_response"
            return answer.model_validate(body[key])
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            fields = ""
            if isinstance(error, ValidationError):
                fields = "_" + "_".join(str(e["loc"][0]) for e in error.errors(include_input=False) if e["loc"])[:60]
            raise GatewayFailure("no-answer", f"WANGWANG_MALFORMED_ANSWER{fields}") from None
