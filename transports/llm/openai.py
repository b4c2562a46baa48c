"""The `openai` provider: any OpenAI-compatible Chat Completions endpoint with tool calling
(DeepSeek, Qwen, vLLM, Ollama, OpenAI), through the official `openai` client.

The client's own retries are off: every attempt is returned to the turn loop, which records a
failed one as `assistant/attempt` (never shown to the model) and decides about backing off.

A process makes at most `max_concurrency` model calls at once (its model slots); the turns
beyond them wait for a slot in the order they asked, so a burst of buyers queues in kefu
instead of opening a connection each against the provider's rate limits. Each slot has a
client of its own with one kept-alive connection, all sharing one TLS context: httpx's pool
looks over every connection it holds at each request and response, so one client holding
hundreds of connections spent more CPU there than the turn itself.
"""

from __future__ import annotations

import base64
import json
import logging
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import httpx
import openai
from pydantic import BaseModel, Field, ValidationError, field_validator

from config import OpenAISettings
from runtime.errors import KefuError
from runtime.ports import AssistantReply, ChatMessage, ModelError, ToolCall, ToolSpec
from runtime.store.lru import Lru

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


class _WireCache:
    """Each message's JSON as sent, kept with the message (whose id it is keyed on): a session's
    view is the same message objects from one call to the next (runtime.agent.view), so a call
    encodes only what is new, and its body is a join. One with images (its bytes loaded for this
    call) is encoded each time and not kept. The message is kept too, so its id is not reused."""

    def __init__(self, max_entries: int = 50_000) -> None:
        self._entries: Lru[int, tuple[ChatMessage, bytes]] = Lru(max_entries)

    def encoded(self, message: ChatMessage) -> bytes:
        held = self._entries.get(id(message))
        if held is not None and held[0] is message:
            return held[1]
        data = json.dumps(_wire_message(message), ensure_ascii=False).encode()
        if not message.images:
            self._entries.put(id(message), (message, data))
        return data


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
        self._base_url, self._api_key, self._timeout_s = base_url, api_key.get_secret_value(), settings.timeout_s
        self._slots = threading.BoundedSemaphore(settings.max_concurrency)
        self._idle: queue.LifoQueue[openai.OpenAI] = queue.LifoQueue()  # the last used, its connection warm, first
        self._tls = httpx.create_ssl_context()  # httpx's default trust store, loaded once
        self._wire = _WireCache()

    @contextmanager
    def _client(self) -> Iterator[openai.OpenAI]:
        """A model slot and its client, for one call (waits while every slot is in use)."""
        with self._slots:
            try:
                client = self._idle.get_nowait()
            except queue.Empty:
                client = openai.OpenAI(
                    base_url=self._base_url,
                    api_key=self._api_key,
                    timeout=self._timeout_s,
                    max_retries=0,
                    http_client=openai.DefaultHttpxClient(
                        timeout=self._timeout_s,
                        verify=self._tls,
                        limits=httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=60),
                    ),
                )
            try:
                yield client
            finally:
                self._idle.put(client)

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
            with self._client() as client:
                client.chat.completions.create(
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
        # The request's JSON, posted through the client's transport (its auth, timeouts and
        # status errors): the typed `chat.completions.create` walks every message against its
        # TypedDicts and builds a model of the response, about a millisecond of CPU a call, and
        # its body would encode the whole view again at every call of a long session.
        head = json.dumps({"model": self.model, "tools": [_wire_tool(t) for t in tools]}, ensure_ascii=False)
        body = b"".join((head[:-1].encode(), b', "messages": [', b", ".join(map(self._wire.encoded, messages)), b"]}"))
        try:
            with self._client() as client:
                response = client.post("/chat/completions", content=body, cast_to=httpx.Response)
            completion = _Completion.model_validate_json(response.content)
        except openai.APITimeoutError:
            raise ModelError("MODEL_TIMEOUT", transient=True) from None
        except openai.APIConnectionError:
            raise ModelError("MODEL_UNREACHABLE", transient=True) from None
        except openai.APIStatusError as error:
            status = error.status_code
            transient = status == 429 or status >= 500
            wait_s = _retry_after_s(error.response.headers) if transient else None
            raise ModelError(f"MODEL_HTTP_{status}", transient=transient, status=status, retry_after_s=wait_s) from None
        except (ValidationError, httpx.HTTPError):  # not a completion, or cut off while read
            raise ModelError("MODEL_BAD_RESPONSE", transient=True) from None
        if not completion.choices:
            raise ModelError("MODEL_BAD_RESPONSE", transient=True)
        message = completion.choices[0].message
        calls = [
            ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "") for c in message.tool_calls
        ]
        return AssistantReply(text=message.content or "", tool_calls=calls, usage=completion.usage)


MAX_RETRY_AFTER_S = 60.0  # a provider's Retry-After beyond this is not waited out: buyers are waiting


def _retry_after_s(headers: httpx.Headers) -> float | None:
    """A rate limit's Retry-After (seconds, or OpenAI's retry-after-ms), at most
    MAX_RETRY_AFTER_S; None when absent or not a number (an HTTP date is not worth parsing)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            value = float(headers.get(name, "")) * scale
        except ValueError:
            continue
        if value >= 0:
            return min(value, MAX_RETRY_AFTER_S)
    return None


class _Function(BaseModel):
    name: str
    arguments: str | None = None


class _ToolCall(BaseModel):
    """A function tool call (a custom, free-form tool call has no `function`: kefu offers
    function tools only, so it is a bad response)."""

    id: str
    type: Literal["function"] = "function"
    function: _Function


class _Message(BaseModel):
    content: str | None = None
    tool_calls: list[_ToolCall] = Field(default_factory=list)

    @field_validator("tool_calls", mode="before")
    @classmethod
    def _none_is_empty(cls, value: object) -> object:
        return [] if value is None else value


class _Choice(BaseModel):
    message: _Message


class _Completion(BaseModel):
    """What kefu reads of a Chat Completions response."""

    choices: list[_Choice]
    usage: dict[str, Any] | None = None
