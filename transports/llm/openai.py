"""The `openai` provider: any OpenAI-compatible Chat Completions endpoint with tool calling
(DeepSeek, Qwen, vLLM, Ollama, OpenAI), through the official `openai` client.

The client's own retries are off: every attempt is returned to the turn loop, which records a
failed one as `assistant/attempt` (never shown to the model) and decides about backing off.
"""

from __future__ import annotations

from typing import Any

import openai
from pydantic import ValidationError

from config import OpenAISettings
from runtime.errors import KefuError
from runtime.ports import AssistantReply, ChatMessage, ModelError, ToolCall, ToolSpec


def _wire_message(message: ChatMessage) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
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
