"""The `openai` provider: any OpenAI-compatible Chat Completions endpoint with tool calling
(DeepSeek, Qwen, vLLM, Ollama, OpenAI), through the official `openai` client.

The client's own retries are off: every attempt is returned to the turn loop, which records a
failed one as `assistant/attempt` (never shown to the model) and decides about backing off.
"""

from __future__ import annotations

import base64
import logging
from typing import Any, Literal

import openai
from pydantic import ValidationError

from config import OpenAISettings
from runtime.errors import KefuError
from runtime.ports import AssistantReply, ChatMessage, ModelError, ToolCall, ToolSpec

log = logging.getLogger(__name__)

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
        """Ask the model about a one-pixel image: KEFU_PROVIDER_NO_VISION if it refuses it (a 4xx
        other than auth, timeout or rate limit) while it answers the same question without the
        image, so a refusal about something else (a parameter, the model name) is not taken for
        one about images; that one is logged and the turns will tell, as when the model cannot be
        reached now. The answer's length is not limited: newer OpenAI models refuse `max_tokens`
        and older servers `max_completion_tokens`, and the question asks for one character."""
        question = "这张图是什么颜色？只答一个字。"
        image: list[dict[str, Any]] = [
            {"type": "text", "text": question},
            {"type": "image_url", "image_url": {"url": _PIXEL}},
        ]
        refused = self._probe(image)
        if not isinstance(refused, int):
            return
        if self._probe(question) == "answered":
            raise KefuError(
                "KEFU_PROVIDER_NO_VISION",
                f"model {self.model} refused an image (HTTP {refused})",
                "use a vision model, or unset KEFU_AGENT__OPENAI__VISION",
            )
        log.warning("vision probe of model %s inconclusive: HTTP %s with or without an image", self.model, refused)

    def _probe(self, content: str | list[dict[str, Any]]) -> int | Literal["answered", "unknown"]:
        """One probe request: answered, the status of a 4xx that refused it (about the request,
        not auth, timeout or rate limit), or unknown (unreachable, those, a 5xx)."""
        try:
            self.client.chat.completions.create(
                model=self.model,
                messages=[{"role": "user", "content": content}],  # type: ignore[list-item,misc]
            )
        except openai.APIStatusError as error:
            status = error.status_code
            return status if 400 <= status < 500 and status not in (401, 403, 408, 429) else "unknown"
        except openai.APIError:
            return "unknown"
        return "answered"

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
