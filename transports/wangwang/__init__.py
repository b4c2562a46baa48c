"""Taobao/Tmall Wangwang through a shop's Qianniu bridge (docs/wangwang-gateway.md)."""

from transports.wangwang.credentials import WangwangCredentials
from transports.wangwang.transport import WangwangTransport

__all__ = ["WangwangCredentials", "WangwangTransport"]
