"""The `openai` provider: any OpenAI-compatible Chat Completions endpoint with tool calling
(DeepSeek, Qwen, vLLM, Ollama, OpenAI), through the official `openai` client.

The client's own retries are off: every attempt is returned to the turn loop, which records a
failed one as `assistant/attempt` (never shown to the model) and decides about backing off.
"""

from __future__ import annotations

import base64
from typing import Any

import openai
from pydantic import ValidationError

from config import OpenAISettings
from runtime.errors import KefuError
from runtime.ports import AssistantReply, ChatMessage, ModelError, ToolCall, ToolSpec

# A 1x1 white PNG: the startup probe of a vision model.
_PIXEL = (
    "data:image/png;base64,"
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4//8/AwAI/AL+hc2rNAAAAABJRU5ErkJggg=="
)


def _wire_message(message: ChatMessage) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.images:  # a vision model's user message: its text, then its images
        images = [
            {"type": "image_url", "image_url": {"url": f"data:{i.mime};base64,{base64.b64encode(i.data).decode()}"}}
            for i in message.images
        ]
        wire["content"] = [{"type": "text", "text": message.content}, *images]
    if message.tool_calls:
        wire["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    return wire


def _wire_tool(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


class OpenAIChatProvider:
    name = "openai"

    def __init__(self, settings: OpenAISettings) -> None:
        base_url, api_key, model = settings.base_url, settings.api_key, settings.model
        if base_url is None or api_key is None or model is None:
            missing = [
                f"KEFU_AGENT__OPENAI__{field.upper()}"
                for field, value in (("base_url", base_url), ("api_key", api_key), ("model", model))
                if value is None
            ]
            raise KefuError(
                "KEFU_PROVIDER_CONFIG", f"the openai provider needs {', '.join(missing)}", "set them, or use rules"
            )
        self.model = model
        self.client = openai.OpenAI(
            base_url=base_url,
            api_key=api_key.get_secret_value(),
            timeout=settings.timeout_s,
            max_retries=0,
        )

    def check_vision(self) -> None:
        """Ask the model about a one-pixel image: KEFU_PROVIDER_NO_VISION if it refuses images
        (KEFU_AGENT__OPENAI__VISION is set). Unreachable now: the turns will tell."""
        probe = [
            {"type": "text", "text": "这张图是什么颜色？只答一个字。"},
            {"type": "image_url", "image_url": {"url": _PIXEL}},
        ]
        try:
            self.client.chat.completions.create(
                model=self.model,
                messages=[{"role": "user", "content": probe}],  # type: ignore[list-item,misc]
                max_tokens=5,
            )
        except openai.APIStatusError as error:
            if 400 <= error.status_code < 500 and error.status_code not in (401, 403, 408, 429):
                raise KefuError(
                    "KEFU_PROVIDER_NO_VISION",
                    f"model {self.model} refused an image (HTTP {error.status_code})",
                    "use a vision model, or unset KEFU_AGENT__OPENAI__VISION",
                ) from None
        except openai.APIError:
            pass

    def complete(self, messages: list[ChatMessage], tools: list[ToolSpec]) -> AssistantReply:
        try:
            response = self.client.chat.completions.create(
                model=self.model,
                # Plain dicts (a message's keys depend on its role) where the client declares TypedDicts.
                messages=[_wire_message(m) for m in messages],  # type: ignore[misc]
                tools=[_wire_tool(t) for t in tools],  # type: ignore[misc]
            )
        except openai.APITimeoutError:
            raise ModelError("MODEL_TIMEOUT", transient=True) from None
        except openai.APIConnectionError:
            raise ModelError("MODEL_UNREACHABLE", transient=True) from None
        except openai.APIStatusError as error:
            status = error.status_code
            transient = status == 429 or status >= 500
            raise ModelError(f"MODEL_HTTP_{status}", transient=transient, status=status) from None
        try:
            message = response.choices[0].message
            calls: list[ToolCall] = []
            for c in message.tool_calls or []:
                if not hasattr(c, "function"):  # a custom (free-form) tool call: kefu offers function tools only
                    raise ModelError("MODEL_BAD_RESPONSE", transient=True)
                calls.append(ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or ""))
        except (IndexError, AttributeError, ValidationError):
            raise ModelError("MODEL_BAD_RESPONSE", transient=True) from None
        usage = response.usage.model_dump() if response.usage else None
        return AssistantReply(text=message.content or "", tool_calls=calls, usage=usage)
