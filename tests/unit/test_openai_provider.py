"""The openai provider against the fake endpoint over real HTTP: model slots bound the calls
in flight, and what is not a completion is a clear transient error."""

from __future__ import annotations

import threading

import pytest

from config.settings import OpenAISettings
from runtime.ports import ChatMessage, ModelError
from tests.fakes.openai_server import FakeOpenAI, Step, completion
from transports.llm.openai import OpenAIChatProvider

BUYER = [ChatMessage(role="user", content="[counterpart 买家b1] 在吗")]


def provider(fake: FakeOpenAI, slots: int = 512) -> OpenAIChatProvider:
    settings = OpenAISettings(base_url=fake.base_url, api_key="k", model="fake", max_concurrency=slots, timeout_s=10)
    return OpenAIChatProvider(settings)


def test_no_more_calls_are_in_flight_than_the_model_slots_and_the_rest_wait_their_turn():
    with FakeOpenAI(latency_s=0.3) as fake:
        model = provider(fake, slots=2)
        replies = []
        threads = [threading.Thread(target=lambda: replies.append(model.complete(BUYER, []))) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(replies) == 6 and all(r.tool_calls for r in replies)  # every one answered
    assert fake.peak_in_flight == 2


@pytest.mark.parametrize(
    ("step", "code", "transient"),
    [
        (Step(status=429), "MODEL_HTTP_429", True),
        (Step(status=400), "MODEL_HTTP_400", False),
        (Step(body={"choices": []}), "MODEL_BAD_RESPONSE", True),
        (Step(body={"unexpected": True}), "MODEL_BAD_RESPONSE", True),
        (
            Step(body={"choices": [{"message": {"content": None, "tool_calls": [{"id": "c1", "type": "custom"}]}}]}),
            "MODEL_BAD_RESPONSE",
            True,
        ),
    ],
)
def test_what_is_not_a_completion_is_a_model_error_naming_it(step, code, transient):
    with FakeOpenAI() as fake:
        fake.script.append(step)
        with pytest.raises(ModelError) as raised:
            provider(fake).complete(BUYER, [])
    assert (raised.value.code, raised.value.transient) == (code, transient)


def test_a_completion_gives_its_text_tool_calls_and_usage():
    with FakeOpenAI() as fake:
        fake.script.append(Step(body=completion("好的", [("c1", "im_send_message", '{"text": "您好"}')])))
        reply = provider(fake).complete(BUYER, [])
    assert reply.text == "好的" and [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("c1", "im_send_message", '{"text": "您好"}')
    ]
    assert reply.usage is not None and reply.usage["total_tokens"] == 110


@pytest.mark.parametrize(
    ("headers", "wait_s"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"Retry-After": "86400"}, 60.0),  # a provider asking for a day is not waited out
        ({"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}, None),
        ({}, None),
    ],
)
def test_a_rate_limit_says_when_to_come_back_within_a_bound(headers, wait_s):
    with FakeOpenAI() as fake:
        fake.script.append(Step(status=429, headers=headers))
        with pytest.raises(ModelError) as raised:
            provider(fake).complete(BUYER, [])
    assert (raised.value.code, raised.value.retry_after_s) == ("MODEL_HTTP_429", wait_s)


def test_each_call_sends_the_whole_view_as_json_however_much_of_it_was_sent_before():
    from runtime.ports import ImageInput, ToolCall, ToolSpec

    tools = [ToolSpec(name="im_send_message", description="回复顾客", parameters={"type": "object"})]
    view = [
        ChatMessage(role="system", content="你是客服"),
        ChatMessage(role="user", content='[counterpart 买家] 在吗 "引号" \\ 换行\n'),
        ChatMessage(
            role="assistant", content="", tool_calls=[ToolCall(id="c1", name="im_send_message", arguments="{}")]
        ),
        ChatMessage(role="tool", content="已发送", tool_call_id="c1"),
    ]
    picture = ChatMessage(
        role="user", content="[image]", images=[ImageInput(sha256="a" * 64, mime="image/png", data=b"\x89PNG")]
    )
    with FakeOpenAI() as fake:
        model = provider(fake)
        model.complete(view, tools)
        model.complete([*view, picture], tools)  # the same message objects again, and a new one
    first, second = fake.requests
    assert first["model"] == second["model"] == "fake" and first["tools"][0]["function"]["name"] == "im_send_message"
    assert second["messages"][:4] == first["messages"] and first["messages"][1]["content"] == view[1].content
    assert second["messages"][4]["content"][1]["image_url"]["url"] == "data:image/png;base64,iVBORw=="
    assert all(
        {k.lower(): v for k, v in headers.items()}["content-type"] == "application/json" for headers in fake.headers
    )
