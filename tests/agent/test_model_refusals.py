"""A request the model service refuses (HTTP 400/404 in OpenAI's error shape) reads as what went wrong and
what to do, in the chat, end to end: the fake OpenAI server answers as the real API does, the runtime and
turn runner turn the SDK's error into the chat's sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.schema import Settings
from tests.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.harness import Harness

pytestmark = pytest.mark.slow  # fake model server, the whole service in process

API_KEY = "sk-live-SUPERSECRET-0123456789"


def settings_for(tmp_path: Path, llm: FakeOpenAI) -> Settings:
    model = {"name": "default", "model": "m", "api_key": API_KEY, "base_url": llm.base_url, "max_retries": 0}
    return make_settings(tmp_path, llm, models=[model])


def refused(message: str, code: str | None, param: str | None = None, status: int = 400) -> Reply:
    return Reply(
        status=status, error=message, error_type="invalid_request_error", error_code=code, error_param=param
    )


async def ask(tmp_path: Path, llm: FakeOpenAI, *replies: Reply) -> str:
    llm.script(*replies)
    async with Harness.running(settings_for(tmp_path, llm)) as h:
        return await h.ask("hello?")


async def test_an_unsupported_parameter_quotes_the_reason_and_points_to_the_admin(
    tmp_path: Path, llm: FakeOpenAI
) -> None:
    answer = await ask(
        tmp_path,
        llm,
        refused(
            "Unsupported parameter: 'temperature' is not supported with this model.",
            "unsupported_parameter",
            "temperature",
        ),
    )
    assert answer.startswith(
        "⚠️ The model rejected the request: Unsupported parameter: 'temperature' is not supported with this"
        " model. This is a model setting, not your message — ask an admin to check the model settings."
        " (trace "
    )
    assert "Something went wrong" not in answer


async def test_a_bad_request_names_the_reason_and_the_way_out_without_echoing_keys_or_urls(
    tmp_path: Path, llm: FakeOpenAI
) -> None:
    # A proxy that echoes where it forwarded the request, and the key it was given.
    message = (
        "Invalid 'messages[3].content': expected a string. Upstream https://admin:hunter2@llm.internal:8443/v1"
        f"?key={API_KEY} refused key {API_KEY}"
    )
    answer = await ask(tmp_path, llm, refused(message, "invalid_value", "messages"))
    assert answer.startswith(
        "⚠️ The model rejected the request: Invalid 'messages[3].content': expected a string. Upstream <url>"
        " refused key ***. Send /new to start a fresh conversation; if that fails too, ask an admin to check"
        " the model settings. (trace "
    )
    for leak in (API_KEY, "SUPERSECRET", "hunter2", "llm.internal", "https://"):
        assert leak not in answer


async def test_an_unknown_model_asks_for_the_admin(tmp_path: Path, llm: FakeOpenAI) -> None:
    answer = await ask(
        tmp_path,
        llm,
        refused(
            "The model `m` does not exist or you do not have access to it.", "model_not_found", status=404
        ),
    )
    assert answer.startswith(
        "⚠️ The model service does not know the configured model (The model `m` does not exist or you do not"
        " have access to it) — ask an admin to check the model settings. (trace "
    )


async def test_a_request_still_too_long_after_compaction_says_new_or_compact(
    tmp_path: Path, llm: FakeOpenAI
) -> None:
    too_long = refused(
        "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens."
        " Please reduce the length of the messages.",
        "context_length_exceeded",
        "messages",
    )
    answer = await ask(tmp_path, llm, *[too_long] * 6)
    assert answer.startswith("⚠️ This conversation is too long for model default — send /new or /compact.")
