"""DingTalk robots: Stream mode (or HTTP callbacks) in, the OpenAPI out."""

from transports.dingtalk.credentials import DingTalkCredentials
from transports.dingtalk.transport import DingTalkTransport

__all__ = ["DingTalkCredentials", "DingTalkTransport"]
