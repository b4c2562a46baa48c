"""The startup probe of a vision model (KEFU_AGENT__OPENAI__VISION) against the fake OpenAI
server: it limits nothing newer models refuse, and only a refusal of the image itself stops the
worker with KEFU_PROVIDER_NO_VISION."""

from __future__ import annotations

import pytest

from config import OpenAISettings
from runtime.errors import KefuError
from tests.fakes.openai_server import FakeOpenAI, Step, completion, images_of
from transports.llm.openai import OpenAIChatProvider


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


def provider(fake: FakeOpenAI) -> OpenAIChatProvider:
    return OpenAIChatProvider(OpenAISettings(base_url=fake.base_url, api_key="sk-test", model="m", timeout_s=2))


def refusal(message: str) -> Step:
    return Step(status=400, body={"error": {"message": message, "type": "invalid_request_error"}})


def test_a_vision_model_answers_one_probe_that_limits_no_tokens(fake):
    fake.script.append(Step(body=completion("白")))
    provider(fake).check_vision()
    [probe] = fake.requests
    assert len(images_of(probe["messages"][0])) == 1
    assert "max_tokens" not in probe and "max_completion_tokens" not in probe  # newer models refuse max_tokens


def test_a_model_that_refuses_the_image_but_answers_without_it_has_no_vision(fake):
    fake.script.extend([refusal("image input is not supported"), Step(body=completion("白"))])
    with pytest.raises(KefuError, match="KEFU_PROVIDER_NO_VISION"):
        provider(fake).check_vision()
    assert [len(images_of(r["messages"][0])) for r in fake.requests] == [1, 0]  # the same question without it


def test_a_refusal_that_is_not_about_the_image_is_not_taken_for_no_vision(fake):
    unsupported = "Unsupported parameter: 'max_tokens' is not supported with this model."
    fake.script.extend([refusal(unsupported), refusal(unsupported)])
    provider(fake).check_vision()  # the turns will tell
    assert len(fake.requests) == 2  # asked with and without the image, then started: no KEFU_PROVIDER_NO_VISION
    fake.script.append(Step(status=401))
    provider(fake).check_vision()  # a wrong key is not about vision either
