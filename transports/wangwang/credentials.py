"""How kefu reaches a shop's Wangwang bridge, and the secret it signs with."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from transports.wangwang.signing import SignMethod


class WangwangCredentials(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    gateway_url: str = Field(pattern=r"^https?://", max_length=1024)
    app_key: str = Field(min_length=1, max_length=128)
    app_secret: SecretStr = Field(min_length=1, max_length=256)
    seller_id: str = Field(min_length=1, max_length=256)
    sign_method: SignMethod = "hmac-sha256"

    def storable(self) -> dict[str, str]:
        return {**self.model_dump(exclude={"app_secret"}), "app_secret": self.app_secret.get_secret_value()}
