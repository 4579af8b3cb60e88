"""A model behind an OpenAI-compatible server that needs no key (Ollama, vLLM) works with only ``base_url``."""

from __future__ import annotations

import pytest

from agent.models import NO_KEY_PLACEHOLDER, ModelLoadError, build_chat_model
from config.schema import ModelConfig
from tests.fakes.openai_server import FakeOpenAI, Reply


@pytest.mark.parametrize(
    ("use", "authorization"),
    [
        # Our default class sends no Authorization header at all to a keyless server.
        ("agent.chat_completions:ChatCompletions", ""),
        # ChatOpenAI insists on a key: it gets a placeholder, never $OPENAI_API_KEY.
        ("langchain_openai:ChatOpenAI", f"Bearer {NO_KEY_PLACEHOLDER}"),
    ],
)
async def test_a_base_url_without_api_key_answers_and_never_sends_the_openai_key(
    monkeypatch, use, authorization
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real-key-must-stay-home")
    with FakeOpenAI() as llm:
        llm.script(Reply(text="hello from ollama"))
        config = ModelConfig(name="local", use=use, model="llama3", base_url=llm.base_url)
        answer = await build_chat_model(config).ainvoke("hi")
    assert answer.content == "hello from ollama"
    assert llm.api_key_seen == [authorization]


def test_without_base_url_a_missing_key_is_still_a_clear_error():
    with pytest.raises(ModelLoadError, match="has no api_key"):
        build_chat_model(ModelConfig(name="cloud"))
