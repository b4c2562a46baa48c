"""A DingTalk robot's credentials: the app's key and secret, and the robot code."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class DingTalkCredentials(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    client_id: str = Field(min_length=1, max_length=128)  # the app's AppKey / ClientID
    client_secret: SecretStr = Field(min_length=1, max_length=256)
    robot_code: str = Field(min_length=1, max_length=128)

    def storable(self) -> dict[str, str]:
        """For the credential table only (the one place the secret is written)."""
        return {**self.model_dump(exclude={"client_secret"}), "client_secret": self.client_secret.get_secret_value()}
